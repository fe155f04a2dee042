"""Custom compactors that tests name by dotted path, the way a worker's settings do.

Real worker processes import this module through ``REDIS_HISTORY_COMPACTOR``
(``compactors_for_tests:KeepLastTurn``), with the tests directory on their path.
"""

from __future__ import annotations

from redis_history import CompactorRequest, Message, Turn
from redis_history.compaction.compactors import summary_message
from redis_history.compaction.summarizers.base import summarize


class KeepLastTurn:
    """Summarizes all but the newest turn it is given, with the worker's summarizer, and keeps
    that turn verbatim; the summary names the conversation it was asked about."""

    def compact(self, request: CompactorRequest) -> list[Message | Turn] | None:
        """A summary of the older turns, then the newest turn as it was."""
        *older, newest = request.turns
        if not older:
            return None
        messages = [m for turn in older for m in turn.to_messages()]
        text = summarize(request.summarizer, messages, request.context)
        covered = sum(request.tokens[: len(messages)])
        summary = summary_message(messages, str(text), covered)
        identity = {
            "namespace": request.namespace,
            "conversation_id": request.conversation_id,
            "keep_last_turns": request.policy.keep_last_turns,
        }
        summary = summary.model_copy(update={"metadata": {**summary.metadata, "for": identity}})
        return [summary, newest]


class Unpaired:
    """A buggy compactor: keeps the prefix but drops the first tool result, leaving its call
    unanswered."""

    def compact(self, request: CompactorRequest) -> list[Message]:
        """The prefix without its first tool message."""
        messages = request.messages
        first = next(i for i, m in enumerate(messages) if m.role == "tool")
        return messages[:first] + messages[first + 1 :]
