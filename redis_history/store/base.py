"""The ``History`` contract every backend keeps (Redis, Redis Cluster, in memory), and its
asyncio twin ``AsyncHistory``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from redis_history.compaction_policy import CompactionPolicy
from redis_history.compaction_state import CompactionState, Event
from redis_history.models import Message
from redis_history.store.codec import Entry
from redis_history.store.core import CompactionStats, Schedule, TranscriptPage
from redis_history.turns import Turn

__all__ = ["AsyncHistory", "History"]


@runtime_checkable
class History(Protocol):
    """One conversation's history: what code built on redis-history may rely on.

    :class:`~redis_history.RedisHistory` and
    :class:`~redis_history.testing.InMemoryHistory` both satisfy it (a test checks
    it, and mypy checks the signatures), so the reference model can stand in for
    Redis in a caller's own tests.
    """

    def append(self, message: Message) -> None:
        """Add one message at the tail, checked; applied once per message id (again once a
        rollback or a truncate removed it)."""

    def append_many(self, messages: Sequence[Message]) -> None:
        """Add a whole turn, all or nothing."""

    def replace(
        self,
        messages: Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        op_id: str | None = None,
    ) -> None:
        """Replace every message, fenced on ``expected_ids`` when given."""

    def splice_prefix(
        self,
        drop_count: int,
        summary: Message | Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        lock_token: str | None = None,
        archive_max_messages: int | None = None,
        archive_max_bytes: int | None = None,
        op_id: str | None = None,
    ) -> int:
        """Replace the oldest messages by a summary, keeping the rest; how many were dropped."""

    def truncate(self, n: int, *, op_id: str | None = None) -> int:
        """Keep at most ``n`` messages (single writer); how many were removed."""

    def rollback(
        self,
        messages: Sequence[str | Message],
        *,
        op_id: str | None = None,
        reopen_calls: bool = False,
    ) -> int:
        """Remove exactly these messages, wherever they are; how many were removed."""

    def record_input_tokens(self, n: int, *, op_id: str | None = None) -> None:
        """Make the LLM's reported input tokens the baseline."""

    def token_estimate(self) -> int | None:
        """Baseline plus tokens since, else the total; ``None`` when empty."""

    def snapshot(self) -> list[Message]:
        """Every live message, in order."""

    def snapshot_openai(self) -> list[dict[str, Any]]:
        """Every live message in the chat-completions format: ``to_openai()`` of each."""

    def entries(self) -> list[Entry]:
        """Every live message with its token count and summary flag."""

    def turns(self, *, allow_open: bool = True) -> list[Turn]:
        """Every live message grouped into turns, tool calls paired with their results."""

    def tail(self, n: int) -> list[Message]:
        """The last ``n`` messages."""

    def range(self, start: int = 0, stop: int | None = None) -> list[Message]:
        """Messages ``[start:stop]``."""

    def transcript(self) -> list[Message]:
        """Archived originals then live messages, without summaries."""

    def transcript_page(self, start: int = 0, count: int = 500) -> TranscriptPage:
        """A page of the full record from position ``start``."""

    def iter_transcript(self, page_size: int = 500) -> Iterator[Message]:
        """The full record, a page at a time."""

    def compaction_state(self) -> CompactionState:
        """The compaction state."""

    def compaction_status(self) -> tuple[int | None, CompactionState]:
        """The token estimate and the compaction state together."""

    def compaction_stats(self) -> CompactionStats:
        """Compactions so far and the tokens they freed."""

    def advance_turn(self, *, op_id: str | None = None) -> CompactionState:
        """Move the compaction state to the next turn."""

    def compaction_event(
        self, event: Event, value: int = 0, freed: int = 0, *, op_id: str | None = None
    ) -> CompactionState:
        """Apply a compaction-state event."""

    def maybe_compact(self, schedule: Schedule, policy: CompactionPolicy | None = None) -> bool:
        """Schedule a compaction if one is due and none is pending."""

    def release_compaction_claim(self, job_id: str) -> bool:
        """Drop the pending-compaction claim if it is still ``job_id``'s."""

    def len(self) -> int:
        """Number of live messages."""

    def __len__(self) -> int:
        """Number of live messages."""

    def is_empty(self) -> bool:
        """Whether there are no messages."""

    def delete(self) -> bool:
        """Forget the conversation; whether it existed."""


@runtime_checkable
class AsyncHistory(Protocol):
    """:class:`History` for asyncio code: the same methods, as coroutines (``iter_transcript``
    an asynchronous iterator, and no ``len()``).

    :class:`~redis_history.AsyncRedisHistory` and
    :class:`~redis_history.testing.AsyncInMemoryHistory` both satisfy it (a test checks it,
    and mypy checks the signatures).
    """

    async def append(self, message: Message) -> None:
        """Add one message at the tail, checked; applied once per message id (again once a
        rollback or a truncate removed it)."""

    async def append_many(self, messages: Sequence[Message]) -> None:
        """Add a whole turn, all or nothing."""

    async def replace(
        self,
        messages: Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        op_id: str | None = None,
    ) -> None:
        """Replace every message, fenced on ``expected_ids`` when given."""

    async def splice_prefix(
        self,
        drop_count: int,
        summary: Message | Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        lock_token: str | None = None,
        archive_max_messages: int | None = None,
        archive_max_bytes: int | None = None,
        op_id: str | None = None,
    ) -> int:
        """Replace the oldest messages by a summary, keeping the rest; how many were dropped."""

    async def truncate(self, n: int, *, op_id: str | None = None) -> int:
        """Keep at most ``n`` messages (single writer); how many were removed."""

    async def rollback(
        self,
        messages: Sequence[str | Message],
        *,
        op_id: str | None = None,
        reopen_calls: bool = False,
    ) -> int:
        """Remove exactly these messages, wherever they are; how many were removed."""

    async def record_input_tokens(self, n: int, *, op_id: str | None = None) -> None:
        """Make the LLM's reported input tokens the baseline."""

    async def token_estimate(self) -> int | None:
        """Baseline plus tokens since, else the total; ``None`` when empty."""

    async def snapshot(self) -> list[Message]:
        """Every live message, in order."""

    async def snapshot_openai(self) -> list[dict[str, Any]]:
        """Every live message in the chat-completions format: ``to_openai()`` of each."""

    async def entries(self) -> list[Entry]:
        """Every live message with its token count and summary flag."""

    async def turns(self, *, allow_open: bool = True) -> list[Turn]:
        """Every live message grouped into turns, tool calls paired with their results."""

    async def tail(self, n: int) -> list[Message]:
        """The last ``n`` messages."""

    async def range(self, start: int = 0, stop: int | None = None) -> list[Message]:
        """Messages ``[start:stop]``."""

    async def transcript(self) -> list[Message]:
        """Archived originals then live messages, without summaries."""

    async def transcript_page(self, start: int = 0, count: int = 500) -> TranscriptPage:
        """A page of the full record from position ``start``."""

    def iter_transcript(self, page_size: int = 500) -> AsyncIterator[Message]:
        """The full record, a page at a time."""

    async def compaction_state(self) -> CompactionState:
        """The compaction state."""

    async def compaction_status(self) -> tuple[int | None, CompactionState]:
        """The token estimate and the compaction state together."""

    async def compaction_stats(self) -> CompactionStats:
        """Compactions so far and the tokens they freed."""

    async def advance_turn(self, *, op_id: str | None = None) -> CompactionState:
        """Move the compaction state to the next turn."""

    async def compaction_event(
        self, event: Event, value: int = 0, freed: int = 0, *, op_id: str | None = None
    ) -> CompactionState:
        """Apply a compaction-state event."""

    async def maybe_compact(
        self, schedule: Schedule, policy: CompactionPolicy | None = None
    ) -> bool:
        """Schedule a compaction if one is due and none is pending."""

    async def release_compaction_claim(self, job_id: str) -> bool:
        """Drop the pending-compaction claim if it is still ``job_id``'s."""

    async def len(self) -> int:
        """Number of live messages."""

    async def is_empty(self) -> bool:
        """Whether there are no messages."""

    async def delete(self) -> bool:
        """Forget the conversation; whether it existed."""
