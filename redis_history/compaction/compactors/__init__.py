"""Compactors: decide what replaces the oldest turns of a conversation.

A worker compacting a conversation takes its lock, cuts the log at the turn
boundary that keeps the policy's tail verbatim, and hands the turns before it
to a :class:`Compactor` in a :class:`CompactorRequest` (the conversation's
namespace and id, the policy, the turns, their token counts, the worker's
token counter and summarizer). What the compactor returns (summary messages,
kept turns, or both) is checked against the tail and written back by the
fenced ``splice_prefix``, whichever compactor it is: only while the worker
holds the lock and the prefix is unchanged, the originals going to the archive.

- :class:`SummarizingCompactor` (alias ``summarize``, the default): one system
  message, the original prompt and a summary of the rest.
- :class:`ToolOutputElider` (alias ``elide-tool-output``): every turn kept,
  bulky tool results replaced by a stub naming the tool and the size removed.

Workers read ``REDIS_HISTORY_COMPACTOR`` (an alias or a dotted path), resolved
by :func:`resolve_compactor`.
"""

from __future__ import annotations

from redis_history.compaction.compactors.base import Compactor, CompactorRequest, Replacement
from redis_history.compaction.compactors.elide import (
    DEFAULT_MIN_BYTES,
    ToolOutputElider,
    elided_stub,
)
from redis_history.compaction.compactors.registry import (
    ALIASES,
    DEFAULT_COMPACTOR,
    resolve_compactor,
)
from redis_history.compaction.compactors.summarize import SummarizingCompactor, summary_message

__all__ = [
    "ALIASES",
    "DEFAULT_COMPACTOR",
    "DEFAULT_MIN_BYTES",
    "Compactor",
    "CompactorRequest",
    "Replacement",
    "SummarizingCompactor",
    "ToolOutputElider",
    "elided_stub",
    "resolve_compactor",
    "summary_message",
]
