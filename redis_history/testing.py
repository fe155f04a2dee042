"""Test doubles shipped with the library and supported like the rest of it.

:class:`InMemoryHistory` is the reference :class:`RedisHistory` semantics in
plain Python: the same validation, token accounting, splice and truncate rules,
with no Redis. Use it in your own unit tests; redis-history's contract suite
runs every backend against it. :class:`FakeSummarizer` stands in for an LLM
summarizer: it records what it was given and answers (or fails) as told.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Concatenate, ParamSpec, TypeVar, Unpack, cast

from redis_history import limits
from redis_history.compaction_policy import CompactionContext, CompactionFacts, CompactionPolicy
from redis_history.compaction_state import CompactionState, Event
from redis_history.errors import (
    HistoryError,
    InvalidMessageError,
    LimitExceededError,
    LockLostError,
    StaleSnapshotError,
    ToolPairingError,
)
from redis_history.models import Message
from redis_history.roles import RoleState
from redis_history.store.codec import Entry, encode_message, read_size, role_item
from redis_history.store.core import (
    APPENDS_DROPPED,
    EVENTS,
    MAX_STATE_VALUE,
    OP_TOKEN_BYTES,
    OPS_KEPT,
    PARTLY_REMOVED,
    CompactionRequest,
    CompactionStats,
    Schedule,
    Splice,
    TranscriptPage,
    TranscriptPages,
    batch_of,
    exhausted_warning,
    ids_of,
    op_token,
    rollback_ids,
    write_token,
)
from redis_history.store.keys import DEFAULT_NAMESPACE, DEFAULT_PREFIX, ConversationKeys
from redis_history.store.options import HistoryOptions, OptionFields
from redis_history.turns import Turn, group_entries
from redis_history.wire.call import Call
from redis_history.wire.twins import AsyncRunner, Work, twin

__all__ = ["AsyncInMemoryHistory", "FakeSummarizer", "InMemoryHistory"]

logger = logging.getLogger("redis_history")

SUMMARY_FLAG = b'"s":1,'
"""What marks a stored envelope as a summary."""


def _fresh() -> bytes:
    """A random operation token, for a write with no natural key (as the store draws one)."""
    return os.urandom(OP_TOKEN_BYTES)


def _parted(open_now: Sequence[str], open_before: Sequence[str]) -> str | None:
    """The first call a rewrite left open that was not open before it: a call it parted
    from its result (``lost_result`` in ``lua/includes/parted.lua``); ``None`` if none."""
    return next((call for call in open_now if call not in open_before), None)


@dataclass(frozen=True, slots=True)
class _Stored:
    message: Message
    tokens: int
    exact: bool
    summary: bool = False
    size: int = 0
    """The stored envelope's length in bytes."""
    read: int = 0
    """What a reader gets back of it (``codec.read_size``): more than ``size`` compressed."""

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
        options: HistoryOptions | None = None,
        **fields: Unpack[OptionFields],
    ) -> None:
        """Validate the names as the Redis history does; options mean the same (``ttl``
        and the ``wait_*`` options have nothing to act on in one process)."""
        options = (options or HistoryOptions()).merged(fields)
        ConversationKeys.build(conversation_id, namespace, options.prefix)
        self.conversation_id = conversation_id
        self.namespace = namespace
        self.options = options
        self.token_counter = options.counter
        self.validate = options.validate
        self.roles = options.roles
        self.max_message_bytes = options.max_message_bytes
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
        """The last ``OPS_KEPT`` appends at least (remembered apart, and forgotten
        ``APPENDS_DROPPED`` at a time, as the scripts do), each with its span: how many of
        its messages the list still holds (0 once compacted or replaced) and whether a
        rollback or a truncate cut it (``lua/includes/spans.lua``)."""
        self._cstate = CompactionState()
        self._gave_up = (0, 0)  # the live length and the reason when compaction gave up
        self._stats = CompactionStats(0, 0)
        self._claim: tuple[str, int] | None = None
        """The pending compaction's job id and when it was claimed (ms)."""
        self._envelopes: list[bytes] = []
        """The envelopes of the last batch encoded (a splice's token is made of them)."""

    def _replayed(self, token: bytes, *, append: bool = False) -> Any:
        """What operation ``token`` returned if it was applied already, else ``None``."""
        return (self._appends if append else self._ops).get(token)

    def _record(self, token: bytes, result: Any = 0, *, append: bool = False) -> None:
        ring = self._appends if append else self._ops
        ring[token] = result
        if len(ring) > OPS_KEPT + (APPENDS_DROPPED - 1 if append else 0):
            for _ in range(APPENDS_DROPPED if append else 1):
                ring.popitem(last=False)

    def _stored(self, messages: Sequence[Message], *, summary: bool = False) -> list[_Stored]:
        exact = self.token_counter.exact
        stored, envelopes = [], []
        try:
            for index, message in enumerate(messages):
                envelope, tokens = encode_message(
                    message,
                    self.token_counter,
                    self.max_message_bytes,
                    summary=summary,
                    index=index,
                )
                role_item(message)
                read = read_size(envelope)
                stored.append(_Stored(message, tokens, exact, summary, len(envelope), read))
                envelopes.append(envelope)
            limits.limited(
                sum(s.read for s in stored), limits.MAX_BATCH_BYTES, "bytes in one write"
            )
        except HistoryError as exc:
            raise self._context(exc) from None
        self._envelopes = envelopes
        return stored

    def _context(self, exc: HistoryError) -> HistoryError:
        exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
        return exc

    def _checked(self, state: RoleState, messages: Sequence[Message]) -> None:
        try:
            state.advance_all(messages, check=self.validate, roles=self.roles)
        except InvalidMessageError as exc:
            raise self._context(exc) from None

    def _reset_baseline(self) -> None:
        self._baseline, self._since = None, 0
        self._exists = True

    def append(self, message: Message) -> None:
        """Add one message at the tail."""
        self.append_many([message])

    def append_many(self, messages: Sequence[Message]) -> None:
        """Add a batch, all or none; a batch of ids already appended is not appended again."""
        stored = self._stored(batch_of(messages))
        if not stored:
            return
        token = op_token("append", [m.id for m in messages])
        span = self._replayed(token, append=True)
        if span is not None:
            if span[1]:
                raise self._stale(PARTLY_REMOVED)
            return
        state = self._state.copy()
        self._checked(state, messages)
        self._items.extend(stored)
        self._state = state
        self._since += sum(s.tokens for s in stored)
        self._exists = True
        self._record(token, (len(stored), False), append=True)

    def replace(
        self,
        messages: Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        op_id: str | None = None,
    ) -> None:
        """Replace every message, if the history holds ``expected_ids``; resets the baseline.
        Messages that are summaries at the head of the history stay summaries (by id)."""
        stored = self._stored(batch_of(messages))
        expected = ids_of(expected_ids, "expected_ids", limits.MAX_BATCH_MESSAGES)
        token = write_token("replace", op_id, _fresh)
        if self._replayed(token) is not None:
            return
        if expected is not None:
            if len(self._items) != len(expected):
                raise self._stale("the conversation no longer holds the expected messages")
            self._within_read(self._items, "the conversation")
            if [s.message.id for s in self._items] != expected:
                raise self._stale("the conversation no longer holds the expected messages")
        state = RoleState()
        self._checked(state, messages)
        head, read = set(), 0
        for position, item in enumerate(self._items):
            read += item.size
            if read > limits.MAX_READ_BYTES or (item.summary and position >= limits.MAX_REWRITE):
                raise self._over("the summaries at the head of the conversation are too many")
            if not item.summary:
                break
            head.add(item.message.id)
        stored = [
            replace(
                s, summary=True, size=s.size + len(SUMMARY_FLAG), read=s.read + len(SUMMARY_FLAG)
            )
            if s.message.id in head and not s.summary
            else s
            for s in stored
        ]
        self._untrack_appends(len(self._items))
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
        splice = Splice.of(
            drop_count,
            summary,
            expected_ids=expected_ids,
            lock_token=lock_token,
            archive_max_messages=archive_max_messages,
            archive_max_bytes=archive_max_bytes,
        )
        stored = self._stored(splice.summaries, summary=True)
        token = splice.token(op_id, self._envelopes)
        done = self._replayed(token)
        if done is not None:
            return int(done)
        if lock_token is not None and lock_token != self.lock_token:
            raise self._context(LockLostError("the compaction lock is not held by this token"))
        items = self._items
        n = min(splice.drop, len(items))
        if splice.expected is not None and splice.drop != n:
            raise self._stale("the conversation has fewer messages than were summarized")
        if n == 0:
            return 0
        read = self._within_read(items[:n], f"the {n} messages to drop")
        if splice.expected is not None and [s.message.id for s in items[:n]] != splice.expected:
            raise self._stale("the summarized prefix is no longer the conversation's")
        made = RoleState()
        if self.validate:
            try:
                made.advance_all(splice.summaries, pairing_only=True)
            except InvalidMessageError as exc:
                raise self._context(exc) from None
            self._check_splice(made, n, read)
        else:
            made.advance_all(splice.summaries, check=False)
        self._untrack_appends(n)
        self._archive.extend(items[:n])
        self._cap_archive(*splice.caps)
        if n == len(items):
            self._state = made
        self._items[:n] = stored
        self._reset_baseline()
        self._exists = True
        self._record(token, n)
        return n

    def _check_splice(self, made: RoleState, n: int, read: int) -> None:
        """What ``splice_prefix-5.lua`` checks: the kept tool results after the prefix
        answer calls the summaries make, no call of theirs stays open before a message,
        and none that was answered ends the conversation open."""
        waiting = list(made.open)
        i = n
        while i < len(self._items):
            read += self._items[i].size
            self._within_read_bytes(read, "the prefix and the tool results after it")
            message = self._items[i].message
            if message.role != "tool":
                if waiting:
                    raise self._pairing("the summaries leave tool calls unanswered", i)
                break
            if message.tool_call_id not in waiting:
                raise self._pairing(
                    f"splicing {n} messages would leave the result of tool call "
                    f"{message.tool_call_id} without its call",
                    i,
                )
            waiting.remove(message.tool_call_id)
            i += 1
        if i == len(self._items) and (parted := _parted(waiting, self._state.open)):
            raise self._pairing(
                f"splicing {n} messages would part tool call {parted} from its result"
            )

    def _pairing(self, reason: str, index: int | None = None) -> ToolPairingError:
        return ToolPairingError(
            reason, index=index, conversation_id=self.conversation_id, namespace=self.namespace
        )

    def _over(self, reason: str) -> LimitExceededError:
        """What a script's refusal over a limit raises (its limit named in ``reason``)."""
        return LimitExceededError(
            reason, conversation_id=self.conversation_id, namespace=self.namespace
        )

    def _within_read(self, items: Sequence[_Stored], what: str) -> int:
        """The bytes of ``items``; ``LimitExceededError`` past ``MAX_READ_BYTES``."""
        read = sum(s.size for s in items)
        self._within_read_bytes(read, what)
        return read

    def _within_read_bytes(self, read: int, what: str) -> None:
        if read > limits.MAX_READ_BYTES:
            raise self._over(f"{what} hold more than {limits.MAX_READ_BYTES} bytes")

    def _cap_archive(self, messages: int, size: int) -> None:
        """Drop the oldest archived entries beyond ``messages`` entries or ``size`` bytes (0:
        no cap), at most ``MAX_REWRITE`` entries and ``MAX_READ_BYTES`` of them a call."""
        stored = sum(s.size for s in self._archive)
        popped = freed = 0
        while (
            self._archive
            and ((messages and len(self._archive) > messages) or (size and stored > size))
            and popped < limits.MAX_REWRITE
            and freed <= limits.MAX_READ_BYTES
        ):
            k = len(self._archive) - messages if messages and len(self._archive) > messages else 1
            k = min(
                k,
                limits.MAX_REWRITE - popped,
                max(1, (limits.MAX_READ_BYTES - freed) // limits.MAX_MESSAGE_BYTES),
            )
            gone = sum(s.size for s in self._archive[:k])
            del self._archive[:k]
            stored, freed, popped = stored - gone, freed + gone, popped + k
            self._capped += k

    def truncate(self, n: int, *, op_id: str | None = None) -> int:
        """Keep at most ``n`` messages; returns how many were removed."""
        keep = limits.position(n, "n", low=0)
        token = write_token("truncate", op_id, _fresh)
        done = self._replayed(token)
        if done is not None:
            return int(done)
        removed = len(self._items) - keep
        if removed <= 0:
            return 0
        if keep > 0:
            if removed > limits.MAX_REWRITE:
                raise self._over(f"truncating to {keep} would remove {removed} messages")
            self._within_read(self._items[keep:], f"the messages after {keep}")
            first = self._items[keep].message
            if self.validate and first.role == "tool":
                raise self._pairing(
                    f"truncating to {keep} would part tool call {first.tool_call_id} from its "
                    "result",
                    keep,
                )
        state = self._state_before(keep)
        self._cut_appends(keep, lambda start, stop: stop - max(start, keep))
        del self._items[keep:]
        self._state = state
        self._reset_baseline()
        self._record(token, removed)
        return removed

    def _cut_appends(self, low: int, count: Callable[[int, int], int]) -> None:
        """After a rollback or a truncate that removes ``count(start, stop)`` of the messages
        at positions ``start`` to ``stop - 1`` and none below ``low``: a recent append whose
        messages all go is forgotten (its batch may be appended again), one that loses some
        is cut. The live spans tile the list's tail, newest last (``cut_spans``)."""
        stop = len(self._items)
        for token in reversed(list(self._appends)):
            live, _cut = self._appends[token]
            if not live or stop <= low:
                break
            k = count(stop - live, stop)
            if k == live:
                del self._appends[token]
            elif k:
                self._appends[token] = (live - k, True)
            stop -= live

    def _untrack_appends(self, below: int) -> None:
        """After a splice of the first ``below`` messages (or a replace of them all): a
        recent append with a message among them stays applied, its span no longer tracked
        (``untrack_spans``)."""
        stop = len(self._items)
        for token in reversed(list(self._appends)):
            live, cut = self._appends[token]
            if not live:
                break
            if stop - live < below:
                self._appends[token] = (0, cut)
            stop -= live

    def _state_before(self, index: int) -> RoleState:
        """The turn state after the first ``index`` messages, reading back as the scripts do
        (``state_before``: to the latest message that is not a tool result)."""
        read, start = 0, index
        while start > 0:
            start -= 1
            read += self._items[start].size
            if read > limits.MAX_READ_BYTES or index - start > limits.MAX_REWRITE:
                raise self._over(f"the tool results before message {index} are too many")
            if self._items[start].message.role != "tool":
                break
        return RoleState.of(s.message for s in self._items[start:index])

    def rollback(
        self,
        messages: Sequence[str | Message],
        *,
        op_id: str | None = None,
        reopen_calls: bool = False,
    ) -> int:
        """Remove exactly these messages wherever they are within reach of the tail (the
        last ``MAX_ROLLBACK`` messages); returns how many."""
        ids = rollback_ids(messages)
        token = write_token("rollback", op_id, _fresh)
        done = self._replayed(token)
        if done is not None:
            return int(done)
        wanted = set(ids)
        length = len(self._items)
        reach = max(0, length - limits.MAX_ROLLBACK)
        seen: set[str] = set()
        start = first = length
        while len(seen) < len(wanted) and start > reach:  # the script's chunks, from the tail
            stop, start = start, max(reach, start - 2 * len(ids) - 8)
            self._within_read(self._items[start:length], "the messages to roll back")
            for i in range(stop - 1, start - 1, -1):
                if self._items[i].message.id in wanted:
                    first = i
                    seen.add(self._items[i].message.id)
        for missing in (i for i in ids if i not in seen):
            if start > 0:
                raise self._over(
                    f"message {missing} is not among the last {limits.MAX_ROLLBACK} messages, "
                    "which a rollback reaches"
                )
            raise self._stale(f"message {missing} is no longer in the conversation")
        kept = [s for s in self._items[first:] if s.message.id not in wanted]
        state = self._state_before(first)
        try:
            state.advance_all((s.message for s in kept), check=self.validate, roles=self.roles)
        except InvalidMessageError as exc:
            raise self._stale(
                f"removing these messages would leave the rest out of order: {exc.message}"
            ) from None
        parted = self.validate and not reopen_calls and _parted(state.open, self._state.open)
        if parted:
            raise self._stale(
                f"removing these messages would part tool call {parted} from its result"
            )
        removed = [i for i in range(first, length) if self._items[i].message.id in wanted]

        def count(start: int, _stop: int) -> int:
            k = 0
            while removed and removed[-1] >= start:
                removed.pop()
                k += 1
            return k

        self._cut_appends(first, count)
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
        n = limits.count(n, "input tokens", high=limits.MAX_TOKENS)
        token = write_token("record", op_id, _fresh)
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
            return group_entries(self.entries(), allow_open=allow_open, roles="lenient")
        except InvalidMessageError as exc:
            exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
            raise

    def tail(self, n: int) -> list[Message]:
        """The last ``n`` messages."""
        n = limits.position(n, "n", low=0)
        return self.snapshot()[max(0, len(self._items) - n) :] if n else []

    def range(self, start: int = 0, stop: int | None = None) -> list[Message]:
        """Messages ``[start:stop]``."""
        start = limits.position(start, "start")
        if stop is not None:
            stop = limits.position(stop, "stop")
        return self.snapshot()[start:stop]

    def transcript(self) -> list[Message]:
        """Archived originals then live messages, without summaries."""
        return list(self.iter_transcript(limits.MAX_PAGE))

    def transcript_page(self, start: int = 0, count: int = 500) -> TranscriptPage:
        """Up to ``count`` entries of the full record from position ``start`` (fewer when
        they read back as more than ``MAX_READ_BYTES``)."""
        start = limits.position(start, "start", low=0)
        count = limits.count(count, "count", low=1, high=limits.MAX_PAGE)
        record = [*self._archive, *self._items]
        first = max(start, self._capped)
        page, read = [], 0
        for stored in record[first - self._capped : first - self._capped + count]:
            if read >= limits.MAX_READ_BYTES:
                break
            page.append(stored)
            read += stored.read
        after = first + len(page)
        return TranscriptPage(
            [s.message for s in page if not s.summary],
            first,
            after if after < self._capped + len(record) else None,
        )

    def iter_transcript(self, page_size: int = 500) -> Iterator[Message]:
        """The full record, ``page_size`` entries at a time."""
        return TranscriptPages().every(lambda start: self.transcript_page(start, page_size))

    def compaction_state(self) -> CompactionState:
        """The compaction state (``Ready`` when never set)."""
        return self._cstate

    def compaction_status(self) -> tuple[int | None, CompactionState]:
        """:meth:`token_estimate` and :meth:`compaction_state` together."""
        return self.token_estimate(), self._cstate

    def compaction_facts(self) -> CompactionFacts:
        """What decides whether compaction is due (see ``RedisHistory``)."""
        stored = sum(item.tokens for item in self._items)
        return CompactionFacts(
            self.token_estimate(), stored, self._cstate, len(self._items), *self._gave_up
        )

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
        if event not in EVENTS:
            raise ValueError(f"event must be one of {', '.join(EVENTS)}, got {event!r}")
        value = limits.count(value, "value", high=MAX_STATE_VALUE)
        freed = limits.count(freed, "freed", high=limits.MAX_TOKENS)
        token = write_token("state", op_id, _fresh)
        done = self._replayed(token)
        if done is not None:
            return done  # type: ignore[no-any-return]
        state = self._cstate.apply(event, value)
        if not self._exists or (state == self._cstate and event not in ("compacted", "exhausted")):
            return state
        self._cstate = state
        if event == "exhausted":
            self._gave_up = (len(self._items), value)
        if event == "compacted":
            self._stats = CompactionStats(
                self._stats.compactions + 1, self._stats.tokens_freed + freed
            )
        self._record(token, state)
        return state

    def maybe_compact(self, schedule: Schedule, policy: CompactionPolicy | None = None) -> bool:
        """Schedule a compaction if one is due and none is pending (see ``RedisHistory``)."""
        policy = policy or CompactionPolicy()
        facts = self.compaction_facts()
        state = facts.state
        if state.is_exhausted() and not state.warned:
            self._cstate = state.on_warned()
            logger.warning(exhausted_warning(self.namespace, self.conversation_id, facts, policy))
        if not policy.due(facts):
            return False
        request = CompactionRequest.new(
            self.namespace, self.conversation_id, DEFAULT_PREFIX, policy, os.urandom
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


P = ParamSpec("P")
T = TypeVar("T")


def _mirrored(method: Callable[Concatenate[InMemoryHistory, P], T]) -> twin[P, T]:
    """``method`` of the model as an operation of :class:`AsyncInMemoryHistory`."""

    @functools.wraps(method)
    def make(front: AsyncInMemoryHistory, /, *args: P.args, **kwargs: P.kwargs) -> Work[T]:
        result = method(front.model, *args, **kwargs)
        return Call(lambda _reply: result, ())

    return twin(make)


class AsyncInMemoryHistory(AsyncRunner):
    """:class:`InMemoryHistory` for asyncio code: the same model (:attr:`model`), its methods
    as coroutines, so it stands in for an :class:`~redis_history.AsyncRedisHistory`
    (it satisfies :class:`~redis_history.AsyncHistory`)."""

    def __init__(self, model: InMemoryHistory | None = None) -> None:
        """Run ``model`` (a new ``InMemoryHistory()`` by default; make one with the options
        and names you need)."""
        self.model = model if model is not None else InMemoryHistory()
        """The sync model this history runs; reading it is reading this history."""
        self.conversation_id = self.model.conversation_id
        self.namespace = self.model.namespace

    async def run(self, work: Work[T]) -> T:
        """The result the model computed (the work is always a call with nothing to send)."""
        assert isinstance(work, Call)
        return cast(T, work.parse(None))

    async def iter_transcript(self, page_size: int = 500) -> AsyncIterator[Message]:
        """The full record, ``page_size`` entries at a time."""
        for message in self.model.iter_transcript(page_size):
            yield message

    append = _mirrored(InMemoryHistory.append)
    append_many = _mirrored(InMemoryHistory.append_many)
    replace = _mirrored(InMemoryHistory.replace)
    splice_prefix = _mirrored(InMemoryHistory.splice_prefix)
    truncate = _mirrored(InMemoryHistory.truncate)
    rollback = _mirrored(InMemoryHistory.rollback)
    record_input_tokens = _mirrored(InMemoryHistory.record_input_tokens)
    token_estimate = _mirrored(InMemoryHistory.token_estimate)
    snapshot = _mirrored(InMemoryHistory.snapshot)
    snapshot_openai = _mirrored(InMemoryHistory.snapshot_openai)
    entries = _mirrored(InMemoryHistory.entries)
    turns = _mirrored(InMemoryHistory.turns)
    tail = _mirrored(InMemoryHistory.tail)
    range = _mirrored(InMemoryHistory.range)
    transcript = _mirrored(InMemoryHistory.transcript)
    transcript_page = _mirrored(InMemoryHistory.transcript_page)
    compaction_state = _mirrored(InMemoryHistory.compaction_state)
    compaction_status = _mirrored(InMemoryHistory.compaction_status)
    compaction_facts = _mirrored(InMemoryHistory.compaction_facts)
    compaction_stats = _mirrored(InMemoryHistory.compaction_stats)
    advance_turn = _mirrored(InMemoryHistory.advance_turn)
    compaction_event = _mirrored(InMemoryHistory.compaction_event)
    maybe_compact = _mirrored(InMemoryHistory.maybe_compact)
    release_compaction_claim = _mirrored(InMemoryHistory.release_compaction_claim)
    len = _mirrored(InMemoryHistory.len)
    is_empty = _mirrored(InMemoryHistory.is_empty)
    delete = _mirrored(InMemoryHistory.delete)

    def __repr__(self) -> str:
        return f"AsyncInMemoryHistory({self.namespace!r}/{self.conversation_id!r})"


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

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """Record ``messages``; return :attr:`text` or raise :attr:`error`."""
        self.calls.append(list(messages))
        if self.error is not None:
            raise self.error
        return self.text
