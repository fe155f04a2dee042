"""Summarizers: turn the oldest messages of a conversation into one short text.

Compaction replaces a conversation's oldest whole turns by a system message
holding the original system prompt and a summary of what was dropped. The
summary comes from a :class:`Summarizer`:

- :class:`ExtractiveSummarizer` needs no model: it keeps the first and last
  user messages and the tool results, verbatim, under ``Previously:``.
- :class:`OpenAICompatibleSummarizer` asks any OpenAI-compatible
  chat-completions endpoint, with only the standard library for HTTP.

Plug-ins are resolved by :func:`resolve_summarizer` from an object, an alias
or a dotted path. A summarizer whose ``summarize`` takes a ``context`` keyword
is also told the conversation (namespace, id) and the policy, as a
:class:`~redis_history.compaction_policy.CompactionContext`; one without is called as before.

The messages a summarizer receives may start with the conversation's system
prompt (left out: compaction keeps it verbatim) or with an earlier summary (a
message whose metadata has ``"summary": True``): its text is kept, without the
system prompt it repeats, so a summary of summaries keeps the old facts.
"""

from __future__ import annotations

from redis_history.compaction.summarizers._text import PREFIX
from redis_history.compaction.summarizers.base import (
    ALIASES,
    AsyncSummarizer,
    Summarizer,
    resolve_summarizer,
)
from redis_history.compaction.summarizers.extractive import ExtractiveSummarizer
from redis_history.compaction.summarizers.openai_compatible import (
    DEFAULT_PROMPT,
    OpenAICompatibleSummarizer,
    render_transcript,
)
from redis_history.errors import SummarizerError

__all__ = [
    "ALIASES",
    "DEFAULT_PROMPT",
    "PREFIX",
    "AsyncSummarizer",
    "ExtractiveSummarizer",
    "OpenAICompatibleSummarizer",
    "Summarizer",
    "SummarizerError",
    "render_transcript",
    "resolve_summarizer",
]
