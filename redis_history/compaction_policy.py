"""When to compact a conversation, and how much of it to keep verbatim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from redis_history.compaction_state import CompactionState

__all__ = ["GAVE_UP", "CompactionContext", "CompactionFacts", "CompactionPolicy"]

GAVE_UP = {1: "no cut", 2: "nothing freed", 3: "tail over the hard limit"}
"""Why compaction gave up on a conversation (the ``exhausted`` event's value): it found no
cut (fewer whole turns than ``keep_last_turns`` + 1, or too short a prefix), the compactor
freed nothing, or the turns it must keep hold more than ``hard_tokens`` by themselves."""


class CompactionFacts(NamedTuple):
    """What the store knows of a conversation that decides whether to compact it, read at
    once (``compaction_facts``)."""

    estimate: int | None
    """The token estimate: what the model last reported plus what was appended since."""
    stored: int
    """The token total of the live messages stored."""
    state: CompactionState
    length: int
    """Live messages."""
    gave_up_at: int = 0
    """Live messages when compaction last gave up on it (0: never, or before this was kept)."""
    gave_up: int = 0
    """Why (a key of :data:`GAVE_UP`; 0 when unknown)."""

    @property
    def tokens(self) -> int:
        """The figure the thresholds compare with: the larger of the estimate (the request
        the model saw, which a ``HistoryManager`` trims to its budget) and the stored total
        (what pods read, price and trim every turn)."""
        return max(self.estimate or 0, self.stored)


class CompactionPolicy(BaseModel):
    """Thresholds and budgets for background compaction; sent to workers as plain JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    soft_tokens: int = Field(default=60_000, gt=0)
    """Compact when the estimate reaches this and the state is ``Ready``."""
    hard_tokens: int = Field(default=100_000, gt=0)
    """Compact even while cooling down when the estimate reaches this."""
    keep_last_turns: int = Field(default=2, ge=0)
    """Whole turns (a user message and everything after it) kept verbatim at the tail."""
    keep_last_tokens: int = Field(default=0, ge=0)
    """Also keep at least this many tokens of the newest turns verbatim (0: no token floor)."""
    cooldown_turns: int = Field(default=2, ge=0, le=(1 << 24) - 1)
    """Turns to wait after a compaction before another soft one."""
    min_messages: int = Field(default=6, ge=2)
    """Do not compact a prefix shorter than this: the summary would not pay for itself."""
    lock_ttl_seconds: float = Field(default=60.0, gt=0)
    """How long a worker's compaction lock lives without a heartbeat."""
    claim_ttl_seconds: float = Field(default=600.0, gt=0)
    """How long an enqueued compaction blocks another, should its job be lost. Shorter than
    ``job_timeout_seconds`` only costs duplicate jobs: the lock still allows one at a time."""
    job_timeout_seconds: int = Field(default=300, gt=0)
    """RQ's limit on one job; above the summarizer's worst case (timeout x attempts + backoff)."""
    archive_max_messages: int | None = Field(default=None, gt=0)
    """Keep at most this many archived originals, dropping the oldest (``None``: keep all)."""
    archive_max_bytes: int | None = Field(default=None, gt=0)
    """Keep at most this many bytes of archived originals, dropping the oldest first."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.hard_tokens < self.soft_tokens:
            raise ValueError("hard_tokens must be >= soft_tokens")
        return self

    def within(self, deployment: CompactionPolicy) -> CompactionPolicy:
        """This policy as a deployment allows a tenant's job to ask for it: it keeps at least
        what ``deployment`` keeps (turns, tokens, the shortest prefix, the cooldown) and may
        keep more; it archives under the deployment's caps and runs within its lock and job
        times; its thresholds (when to compact) are its own."""
        return self.model_copy(
            update={
                "keep_last_turns": max(self.keep_last_turns, deployment.keep_last_turns),
                "keep_last_tokens": max(self.keep_last_tokens, deployment.keep_last_tokens),
                "min_messages": max(self.min_messages, deployment.min_messages),
                "cooldown_turns": max(self.cooldown_turns, deployment.cooldown_turns),
                "archive_max_messages": deployment.archive_max_messages,
                "archive_max_bytes": deployment.archive_max_bytes,
                "lock_ttl_seconds": deployment.lock_ttl_seconds,
                "job_timeout_seconds": deployment.job_timeout_seconds,
            }
        )

    def cuttable(self, length: int) -> bool:
        """Whether ``length`` live messages may hold a cut: a prefix of ``min_messages`` and
        ``keep_last_turns`` turns after it, one message each at least, and a system message."""
        return length > self.min_messages + self.keep_last_turns

    def retry_at(self, gave_up_at: int) -> int:
        """The live length at which a conversation compaction gave up on at ``gave_up_at``
        messages is tried again: twice as long, and ``min_messages`` longer at least, so that
        a conversation growing to ``n`` messages costs at most ``log2(n)`` jobs that cannot
        cut."""
        return max(2 * gave_up_at, gave_up_at + self.min_messages)

    def due(self, facts: CompactionFacts) -> bool:
        """Whether a conversation is due for compaction: its figure (:attr:`CompactionFacts.tokens`)
        at ``hard_tokens``, or at ``soft_tokens`` in ``Ready``; never twice in a turn, nor while
        it holds too few messages for a cut; ``Exhausted`` at ``soft_tokens`` once it has grown
        to :meth:`retry_at` the length compaction gave up at."""
        tokens, state = facts.tokens, facts.state
        if not tokens or state.is_compacted_this_turn() or not self.cuttable(facts.length):
            return False
        if state.is_exhausted():
            return tokens >= self.soft_tokens and facts.length >= self.retry_at(facts.gave_up_at)
        if tokens >= self.hard_tokens:
            return True
        return tokens >= self.soft_tokens and state == CompactionState.ready()


@dataclass(frozen=True, slots=True)
class CompactionContext:
    """The conversation a compaction is for, and its policy: what compactors and summarizers
    are told besides the messages."""

    namespace: str
    """The conversation's namespace (tenant)."""
    conversation_id: str
    """The conversation's id within its namespace."""
    policy: CompactionPolicy
    """The policy the compaction runs under (the protected tail, thresholds, caps)."""
