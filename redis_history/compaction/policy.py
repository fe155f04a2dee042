"""When to compact a conversation, and how much of it to keep verbatim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from redis_history.compaction.state import CompactionState

__all__ = ["CompactionContext", "CompactionPolicy"]


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

    def should_compact(self, estimate: int | None, state: CompactionState) -> bool:
        """Whether a conversation at ``estimate`` tokens in ``state`` is due for compaction."""
        if estimate is None or state.is_exhausted() or state.is_compacted_this_turn():
            return False
        if estimate >= self.hard_tokens:
            return True
        return estimate >= self.soft_tokens and state == CompactionState.ready()


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
