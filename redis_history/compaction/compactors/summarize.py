"""The default compactor: the prefix becomes one system message, the prompt and a summary."""

from __future__ import annotations

from collections.abc import Sequence

from redis_history.compaction.compactors.base import CompactorRequest
from redis_history.compaction.summarizers import Summarizer
from redis_history.compaction.summarizers.base import summarize
from redis_history.errors import SummarizerError
from redis_history.models import Message

__all__ = ["SummarizingCompactor", "summary_message"]


class SummarizingCompactor:
    """Replaces the turns it is given by one system message: the original system prompt
    verbatim, then a summary of everything else.

    The summary comes from the worker's configured summarizer (``request.summarizer``)
    unless one is given here; it is passed the conversation's
    :class:`~redis_history.compaction_policy.CompactionContext` when it takes one.
    """

    def __init__(self, summarizer: Summarizer | None = None) -> None:
        """Set the summarizer.

        Args:
            summarizer: summarizes the prefix; ``None`` for the worker's configured one.
        """
        self.summarizer = summarizer

    def compact(self, request: CompactorRequest) -> list[Message]:
        """One summary message in place of ``request.turns``.

        Raises:
            SummarizerError: the summarizer returned no text; its own errors pass through.
        """
        summarizer = self.summarizer or request.summarizer
        messages = request.messages
        text = summarize(summarizer, messages, request.context)
        if not isinstance(text, str) or not text.strip():
            raise SummarizerError(
                f"{type(summarizer).__name__}.summarize returned {type(text).__name__} "
                f"{str(text)[:40]!r}, not summary text",
                conversation_id=request.conversation_id,
                namespace=request.namespace,
            )
        return [summary_message(messages, text, sum(request.tokens))]

    def __repr__(self) -> str:
        return f"SummarizingCompactor(summarizer={self.summarizer!r})"


def summary_message(messages: Sequence[Message], text: str, tokens: int) -> Message:
    """One system message: the original system prompt of ``messages`` verbatim, then ``text``.

    Its metadata says it is a summary, repeats the prompt, names the messages it
    covers (all but the prompt) and the tokens they held.
    """
    head = 1 if messages and messages[0].role == "system" else 0
    first = messages[0] if head else None
    prompt = (first.metadata.get("system_prompt", first.content) if first else "") or ""
    content = f"{prompt}\n\n{text}" if prompt else text
    return Message.system(
        content,
        metadata={
            "summary": True,
            "system_prompt": prompt,
            "covers": [m.id for m in messages[head:]],
            "tokens_replaced": tokens,
        },
    )
