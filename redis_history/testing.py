"""Test doubles shipped with the library and supported like the rest of it.

:class:`InMemoryHistory` is the reference :class:`RedisHistory` semantics in
plain Python: the same validation, token accounting, splice and truncate rules,
with no Redis. Use it in your own unit tests; redis-history's contract suite
runs every backend against it. :class:`FakeSummarizer` stands in for an LLM
summarizer: it records what it was given and answers (or fails) as told.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from redis_history._core import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OPS_KEPT,
    CompactionRequest,
    CompactionStats,
    HistoryCore,
    Schedule,
    TranscriptPage,
    TranscriptPages,
    exhausted_warning,
    op_token,
)
from redis_history.codec import Entry, encode_message
from redis_history.errors import (
    InvalidMessageError,
    LockLostError,
    StaleSnapshotError,
)
from redis_history.keys import DEFAULT_NAMESPACE, DEFAULT_PREFIX, ConversationKeys
from redis_history.models import Message
from redis_history.policy import CompactionPolicy
from redis_history.roles import RoleState
from redis_history.state import CompactionState, Event
from redis_history.tokens import TokenCounter, resolve_counter
from redis_history.turns import Turn, group_entries

__all__ = ["FakeSummarizer", "InMemoryHistory"]

logger = logging.getLogger("redis_history")


@dataclass(frozen=True, slots=True)
class _Stored:
    message: Message
    tokens: int
    exact: bool
    summary: bool = False
    size: int = 0
    """The stored envelope's length in bytes."""

    def entry(self) -> Entry:
        return Entry(
            tokens=self.tokens, exact=self.exact, summary=self.summary, message=self.message
        )


class InMemoryHistory:
    """A single-process history with exactly :class:`~redis_history.RedisHistory`'s semantics."""

    def __init__(
        self,
        conversation_id: str = "memory",
        *,
        namespace: str = DEFAULT_NAMESPACE,
        token_counter: TokenCounter | str | None = None,
        validate: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        """Validate the names as the Redis history does; options mean the same."""
        ConversationKeys.build(conversation_id, namespace)
        self.conversation_id = conversation_id
        self.namespace = namespace
        self.token_counter = resolve_counter(token_counter)
        self.validate = validate
        self.max_message_bytes = max_message_bytes
        self.lock_token: str | None = None
        """The compaction lock holder; ``splice_prefix(lock_token=...)`` is fenced on it."""
        self._clear()

    def _clear(self) -> None:
        self._items: list[_Stored] = []
        self._archive: list[_Stored] = []
        self._capped = 0
        self._state = RoleState()
        self._baseline: int | None = None
        self._since = 0
        self._exists = False
        self._ops: OrderedDict[bytes, Any] = OrderedDict()
        """The last ``OPS_KEPT`` operations other than appends, and what each returned."""
        self._appends: OrderedDict[bytes, Any] = OrderedDict()
        """The last ``OPS_KEPT`` appends (remembered apart, as the scripts do)."""
        self._cstate = CompactionState()
        self._stats = CompactionStats(0, 0)
        self._claim: tuple[str, int] | None = None
        """The pending compaction's job id and when it was claimed (ms)."""

    def _replayed(self, token: bytes, *, append: bool = False) -> Any:
        """What operation ``token`` returned if it was applied already, else ``None``."""
        return (self._appends if append else self._ops).get(token)

    def _record(self, token: bytes, result: Any = 0, *, append: bool = False) -> None:
        ring = self._appends if append else self._ops
        ring[token] = result
        while len(ring) > OPS_KEPT:
            ring.popitem(last=False)

    def _stored(self, messages: Sequence[Message], *, summary: bool = False) -> list[_Stored]:
        exact = self.token_counter.exact
        stored = []
        for index, message in enumerate(messages):
            try:
                envelope, tokens = encode_message(
                    message,
                    self.token_counter,
                    self.max_message_bytes,
                    summary=summary,
                    index=index,
                )
            except InvalidMessageError as exc:
                exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
                raise
            stored.append(_Stored(message, tokens, exact, summary, len(envelope)))
        return stored

    def _checked(self, state: RoleState, messages: Sequence[Message]) -> None:
        try:
            state.advance_all(messages, check=self.validate)
        except InvalidMessageError as exc:
            exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
            raise

    def _reset_baseline(self) -> None:
        self._baseline, self._since = None, 0
        self._exists = True

    def append(self, message: Message) -> None:
        """Add one message at the tail."""
        self.append_many([message])

    def append_many(self, messages: Sequence[Message]) -> None:
        """Add a batch, all or none; a batch of ids already appended is not appended again."""
        stored = self._stored(messages)
        token = op_token("append", [m.id for m in messages])
        if self._replayed(token, append=True) is not None:
            return
        state = self._state.copy()
        self._checked(state, messages)
        self._items.extend(stored)
        self._state = state
        self._since += sum(s.tokens for s in stored)
        self._exists = True
        self._record(token, append=True)

    def replace(
        self,
        messages: Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        op_id: str | None = None,
    ) -> None:
        """Replace every message, if the history holds ``expected_ids``; resets the baseline."""
        stored = self._stored(messages)
        token = HistoryCore._token("replace", op_id)
        if self._replayed(token) is not None:
            return
        if expected_ids is not None and [s.message.id for s in self._items] != list(expected_ids):
            raise StaleSnapshotError("the conversation no longer holds the expected messages")
        state = RoleState()
        self._checked(state, messages)
        self._items, self._state = stored, state
        self._reset_baseline()
        self._record(token, len(stored))

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
        """Replace the first ``drop_count`` messages with ``summary``; returns how many dropped."""
        summaries = [summary] if isinstance(summary, Message) else list(summary)
        if not summaries:
            raise ValueError("splice_prefix needs at least one summary message")
        if drop_count < 0:
            raise ValueError(f"drop_count must be >= 0, got {drop_count}")
        if expected_ids is not None and len(expected_ids) != drop_count:
            raise ValueError(
                f"expected_ids names {len(expected_ids)} messages, drop_count is {drop_count}"
            )
        for cap in (archive_max_messages, archive_max_bytes):
            if cap is not None and cap <= 0:
                raise ValueError(f"archive caps must be positive or None, got {cap}")
        stored = self._stored(summaries, summary=True)
        token = HistoryCore._token("splice", op_id, (str(drop_count), *(m.id for m in summaries)))
        done = self._replayed(token)
        if done is not None:
            return int(done)
        if lock_token is not None and lock_token != self.lock_token:
            raise LockLostError("the compaction lock is not held by this token")
        n = min(drop_count, len(self._items))
        if expected_ids is not None:
            current = [s.message.id for s in self._items[:n]]
            if current != list(expected_ids):
                raise StaleSnapshotError("the summarized prefix is no longer the conversation's")
        if n == 0:
            return 0
        if n == len(self._items):
            self._state = RoleState.of(summaries)
        self._archive.extend(self._items[:n])
        self._cap_archive(archive_max_messages, archive_max_bytes)
        self._items[:n] = stored
        self._reset_baseline()
        self._exists = True
        self._record(token, n)
        return n

    def _cap_archive(self, messages: int | None, size: int | None) -> None:
        """Drop the oldest archived entries beyond ``messages`` entries or ``size`` bytes."""
        if messages is not None and len(self._archive) > messages:
            self._capped += len(self._archive) - messages
            del self._archive[: len(self._archive) - messages]
        if size is not None:
            while self._archive and sum(s.size for s in self._archive) > size:
                self._archive.pop(0)
                self._capped += 1

    def truncate(self, n: int, *, op_id: str | None = None) -> int:
        """Keep at most ``n`` messages; returns how many were removed."""
        if n < 0:
            raise ValueError(f"truncate keeps n >= 0 messages, got {n}")
        token = HistoryCore._token("truncate", op_id)
        done = self._replayed(token)
        if done is not None:
            return int(done)
        removed = len(self._items) - n
        if removed <= 0:
            return 0
        del self._items[n:]
        self._state = RoleState.of(s.message for s in self._items)
        self._reset_baseline()
        self._record(token, removed)
        return removed

    def rollback(self, messages: Sequence[str | Message], *, op_id: str | None = None) -> int:
        """Remove exactly these messages wherever they are; returns how many."""
        ids = list(dict.fromkeys(m.id if isinstance(m, Message) else m for m in messages))
        if not ids or not all(isinstance(i, str) and i for i in ids):
            raise ValueError(f"rollback needs one or more message ids, got {messages!r}")
        token = HistoryCore._token("rollback", op_id)
        done = self._replayed(token)
        if done is not None:
            return int(done)
        positions = [i for i, s in enumerate(self._items) if s.message.id in set(ids)]
        present = {self._items[i].message.id for i in positions}
        missing = [i for i in ids if i not in present]
        if missing:
            raise self._stale(f"message {missing[0]} is no longer in the conversation")
        first = positions[0]
        kept = [s for s in self._items[first:] if s.message.id not in present]
        state = RoleState.of(s.message for s in self._items[:first])
        try:
            state.advance_all((s.message for s in kept), check=self.validate)
        except InvalidMessageError as exc:
            raise self._stale(
                f"removing these messages would leave the rest out of order: {exc.message}"
            ) from None
        self._items[first:] = kept
        self._state = state
        self._reset_baseline()
        self._record(token, len(ids))
        return len(ids)

    def _stale(self, reason: str) -> StaleSnapshotError:
        return StaleSnapshotError(
            reason, conversation_id=self.conversation_id, namespace=self.namespace
        )

    def record_input_tokens(self, n: int, *, op_id: str | None = None) -> None:
        """Make ``n`` the baseline (of a conversation that exists)."""
        if n < 0:
            raise ValueError(f"input tokens must be >= 0, got {n}")
        token = HistoryCore._token("record", op_id)
        if not self._exists or self._replayed(token) is not None:
            return
        self._baseline, self._since = n, 0
        self._record(token)

    def token_estimate(self) -> int | None:
        """Baseline plus tokens since, else the total; ``None`` when empty."""
        total = sum(s.tokens for s in self._items)
        if not total:
            return None
        if self._baseline is not None:
            return self._baseline + self._since
        return total

    def snapshot(self) -> list[Message]:
        """Every live message, in order."""
        return [s.message for s in self._items]

    def snapshot_openai(self) -> list[dict[str, Any]]:
        """Every live message in the chat-completions format."""
        return [s.message.to_openai() for s in self._items]

    def entries(self) -> list[Entry]:
        """Every live message with its token count and summary flag."""
        return [s.entry() for s in self._items]

    def turns(self, *, allow_open: bool = True) -> list[Turn]:
        """Every live message grouped into turns; see ``RedisHistory.turns``."""
        try:
            return group_entries(self.entries(), allow_open=allow_open)
        except InvalidMessageError as exc:
            exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
            raise

    def tail(self, n: int) -> list[Message]:
        """The last ``n`` messages."""
        if n < 0:
            raise ValueError(f"tail needs n >= 0, got {n}")
        return self.snapshot()[len(self._items) - n :] if n else []

    def range(self, start: int = 0, stop: int | None = None) -> list[Message]:
        """Messages ``[start:stop]``."""
        return self.snapshot()[start:stop]

    def transcript(self) -> list[Message]:
        """Archived originals then live messages, without summaries."""
        return [s.message for s in (*self._archive, *self._items) if not s.summary]

    def transcript_page(self, start: int = 0, count: int = 500) -> TranscriptPage:
        """Up to ``count`` entries of the full record from position ``start``."""
        if start < 0 or count <= 0:
            raise ValueError(
                f"a transcript page needs start >= 0 and count > 0, got {start}, {count}"
            )
        record = [*self._archive, *self._items]
        first = max(start, self._capped)
        page = record[first - self._capped : first - self._capped + count]
        after = first + len(page)
        return TranscriptPage(
            [s.message for s in page if not s.summary],
            first,
            after if after < self._capped + len(record) else None,
        )

    def iter_transcript(self, page_size: int = 500) -> Iterator[Message]:
        """The full record, ``page_size`` entries at a time."""
        pages = TranscriptPages()
        start: int | None = 0
        while start is not None:
            page = self.transcript_page(start, page_size)
            yield from pages.fresh(page)
            start = page.next

    def compaction_state(self) -> CompactionState:
        """The compaction state (``Ready`` when never set)."""
        return self._cstate

    def compaction_status(self) -> tuple[int | None, CompactionState]:
        """:meth:`token_estimate` and :meth:`compaction_state` together."""
        return self.token_estimate(), self._cstate

    def compaction_stats(self) -> CompactionStats:
        """How many compactions this conversation has had, and the tokens they freed."""
        return self._stats

    def advance_turn(self, *, op_id: str | None = None) -> CompactionState:
        """Move the compaction state to the next turn."""
        return self.compaction_event("advance_turn", op_id=op_id)

    def compaction_event(
        self, event: Event, value: int = 0, freed: int = 0, *, op_id: str | None = None
    ) -> CompactionState:
        """Apply a compaction-state event; a conversation that does not exist is left alone."""
        token = HistoryCore._token("state", op_id)
        done = self._replayed(token)
        if done is not None:
            return done  # type: ignore[no-any-return]
        state = self._cstate.apply(event, value)
        if not self._exists or (state == self._cstate and event != "compacted"):
            return state
        self._cstate = state
        if event == "compacted":
            self._stats = CompactionStats(
                self._stats.compactions + 1, self._stats.tokens_freed + freed
            )
        self._record(token, state)
        return state

    def maybe_compact(self, schedule: Schedule, policy: CompactionPolicy | None = None) -> bool:
        """Schedule a compaction if one is due and none is pending (see ``RedisHistory``)."""
        policy = policy or CompactionPolicy()
        estimate, state = self.compaction_status()
        if state.is_exhausted() and not state.warned:
            self._cstate = state.on_warned()
            logger.warning(
                exhausted_warning(self.namespace, self.conversation_id, estimate, policy)
            )
        if not policy.should_compact(estimate, state):
            return False
        request = CompactionRequest.new(
            self.namespace, self.conversation_id, DEFAULT_PREFIX, policy
        )
        now = time.time_ns() // 1_000_000
        if self._claim and now - self._claim[1] < request.claim_ms:
            return False
        self._claim = (request.job_id, now)
        try:
            schedule(request)
        except BaseException:
            self.release_compaction_claim(request.job_id)
            raise
        return True

    def release_compaction_claim(self, job_id: str) -> bool:
        """Drop the pending-compaction claim if it is still ``job_id``'s."""
        token = op_token("release", (job_id,))
        if self._replayed(token) is not None:
            return True
        if self._claim is None or self._claim[0] != job_id:
            return False
        self._claim = None
        self._record(token)
        return True

    def len(self) -> int:
        """Number of live messages."""
        return len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def is_empty(self) -> bool:
        """Whether there are no messages."""
        return not self._items

    def delete(self) -> bool:
        """Forget everything; whether anything existed."""
        existed = self._exists
        self._clear()
        return existed


class FakeSummarizer:
    """A summarizer that records each call and answers with ``text``, or raises ``error``."""

    def __init__(
        self, text: str = "Previously: (a fake summary)", *, error: Exception | None = None
    ) -> None:
        """Answer every call with ``text``, or raise ``error`` when one is given."""
        self.text = text
        self.error = error
        self.calls: list[list[Message]] = []
        """The messages of every call, oldest call first."""

    def summarize(self, messages: Sequence[Message]) -> str:
        """Record ``messages``; return :attr:`text` or raise :attr:`error`."""
        self.calls.append(list(messages))
        if self.error is not None:
            raise self.error
        return self.text
