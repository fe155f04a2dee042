"""The Compactor protocol and the request a compactor is given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from redis_history.compaction.summarizers import Summarizer
from redis_history.compaction_policy import CompactionContext, CompactionPolicy
from redis_history.models import Message
from redis_history.tokens import TokenCounter
from redis_history.turns import Turn, to_messages

__all__ = ["Compactor", "CompactorRequest", "Replacement"]


@dataclass(frozen=True, slots=True)
class CompactorRequest:
    """What a compactor is given: the conversation, its policy, and the turns it may compact.

    The turns are the conversation's prefix before the tail the policy protects,
    cut at a turn boundary (never inside a tool pair), grouped by
    :func:`~redis_history.group_entries`: the first turn's lead holds the system
    prompt or the summaries an earlier compaction wrote.
    """

    context: CompactionContext
    """The conversation's namespace and id, and the policy."""
    turns: tuple[Turn, ...]
    """The whole turns the compactor may replace, oldest first."""
    tokens: tuple[int, ...]
    """The stored token count of each message of :attr:`messages`, in order."""
    token_counter: TokenCounter
    """The worker's counter, to price what the compactor writes."""
    summarizer: Summarizer
    """The worker's configured summarizer, for compactors that summarize."""

    @property
    def namespace(self) -> str:
        """The conversation's namespace."""
        return self.context.namespace

    @property
    def conversation_id(self) -> str:
        """The conversation's id."""
        return self.context.conversation_id

    @property
    def policy(self) -> CompactionPolicy:
        """The policy the compaction runs under."""
        return self.context.policy

    @property
    def messages(self) -> list[Message]:
        """The turns' messages, in order, exactly as stored."""
        return to_messages(self.turns)


Replacement: TypeAlias = Sequence[Message | Turn] | None
"""What a compactor returns: the messages (or whole turns, flattened in order) that take
the place of exactly the turns it was given; ``None`` or empty when it has nothing to do."""


@runtime_checkable
class Compactor(Protocol):
    """Decides what replaces the oldest turns of a conversation.

    The worker calls :meth:`compact` under the conversation's lock and writes
    what it returns back with the same fenced ``splice_prefix`` whatever the
    compactor: only if the lock is still held and the prefix is unchanged, the
    originals going to the archive. Before that, the replacement is checked
    against the tail (role order, tool pairing); one that does not fit raises
    :class:`~redis_history.errors.CompactorError` and nothing is written.
    """

    def compact(self, request: CompactorRequest) -> Replacement:
        """What replaces ``request.turns``; ``None`` (or empty) for nothing to do."""
        ...
