"""The sans-IO core shared by the sync and asyncio histories.

Each operation is a :class:`Call`: which script or command to run, with which
keys and arguments, and how to turn Redis's reply into a result or a typed
error. The front ends only execute calls, so no method's logic exists twice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, NamedTuple, TypeVar

from redis import exceptions as redis_errors

from redis_history.codec import Entry, batch_args, decode_entries
from redis_history.errors import (
    CorruptHistoryError,
    HistoryError,
    InvalidMessageError,
    InvalidTransition,
    StoreUnavailableError,
)
from redis_history.keys import DEFAULT_NAMESPACE, DEFAULT_PREFIX, ConversationKeys
from redis_history.models import Message
from redis_history.policy import CompactionPolicy
from redis_history.scripts import ERRORS
from redis_history.state import CompactionState, Event
from redis_history.tokens import TokenCounter, resolve_counter

__all__ = [
    "COMPACTION_FUNCTION",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Call",
    "CompactionJob",
    "CompactionStats",
    "HistoryCore",
]

COMPACTION_FUNCTION = "redis_history.jobs.compact_conversation"
"""What workers run, named by path so that enqueueing needs neither rq nor the jobs module."""

T = TypeVar("T")

RESULT_TTL = 3600
"""Seconds RQ keeps a finished job's small JSON result (status, dropped, tokens freed)."""
FAILURE_TTL = 24 * 3600
"""Seconds RQ keeps a failed job and its traceback."""

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20


class Call(NamedTuple, Generic[T]):
    """One Redis round trip: a registered script (``script``) or a plain command (``command``)."""

    parse: Callable[[Any], T]
    script: str | None = None
    keys: tuple[str, ...] = ()
    args: tuple[Any, ...] = ()
    command: tuple[Any, ...] = ()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ttl_ms(ttl: float | timedelta | None) -> int:
    if ttl is None:
        return 0
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if seconds <= 0:
        raise ValueError(f"ttl must be positive, got {ttl!r}")
    return max(1, round(seconds * 1000))


class HistoryCore:
    """Key names, script arguments and reply decoding for one conversation."""

    def __init__(
        self,
        conversation_id: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        prefix: str = DEFAULT_PREFIX,
        token_counter: TokenCounter | str | None = None,
        validate: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        ttl: float | timedelta | None = None,
    ) -> None:
        self.keys = ConversationKeys.build(conversation_id, namespace, prefix)
        self.conversation_id = conversation_id
        self.namespace = namespace
        self.prefix = prefix
        self.counter = resolve_counter(token_counter)
        self.validate = validate
        if max_message_bytes <= 0:
            raise ValueError("max_message_bytes must be positive")
        self.max_message_bytes = max_message_bytes
        self.ttl_ms = _ttl_ms(ttl)
        self._head = (int(validate), self.ttl_ms)
        """What append and replace send before their batch: the check flag and the ttl."""
        self._data = self.keys.data

    # -- errors -------------------------------------------------------------------------------

    def _context(self, exc: HistoryError) -> HistoryError:
        exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
        return exc

    def wrap(self, exc: redis_errors.RedisError) -> HistoryError:
        """The typed error for a redis-py error (callers ``raise ... from exc``)."""
        if isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError):
            return self._context(StoreUnavailableError(f"Redis is unavailable: {exc}"))
        if isinstance(exc, redis_errors.ResponseError) and "WRONGTYPE" in str(exc):
            return self._context(
                CorruptHistoryError(f"a conversation key holds the wrong data type: {exc}")
            )
        return self._context(HistoryError(f"Redis refused the operation: {exc}"))

    def _checked(self, reply: Any) -> Any:
        """A script's result; a refusal (``[code, index, reason]``) raises the mapped exception."""
        if not isinstance(reply, list):
            return reply
        code = int(reply[0])
        error = ERRORS.get(code)
        if error is None:
            raise self._context(HistoryError(f"unknown script result code {code}: {reply!r}"))
        index = int(reply[1])
        reason = _text(reply[2])
        if issubclass(error, InvalidMessageError | CorruptHistoryError):
            raise self._context(error(reason, index=index if index >= 0 else None))
        raise self._context(error(reason))

    def _decode(self, raw: Sequence[bytes | str]) -> list[Entry]:
        try:
            return decode_entries(raw)
        except CorruptHistoryError as exc:
            raise self._context(exc) from exc.__cause__

    def _args(
        self, head: tuple[Any, ...], messages: Sequence[Message], *, summary: bool = False
    ) -> tuple[Any, ...]:
        """A write script's arguments: ``head`` (ending with the ttl), then the batch."""
        try:
            return batch_args(head, messages, self.counter, self.max_message_bytes, summary=summary)
        except InvalidMessageError as exc:
            raise self._context(exc) from None

    # -- writes -------------------------------------------------------------------------------

    def _none(self, reply: Any) -> None:
        self._checked(reply)

    def _count(self, reply: Any) -> int:
        return int(self._checked(reply))

    def append(self, messages: Sequence[Message]) -> Call[None]:
        """Append ``messages`` at the tail, all or none."""
        return Call(self._none, "append", self._data, self._args(self._head, messages))

    def replace(self, messages: Sequence[Message]) -> Call[None]:
        """Replace the whole list; resets the baseline."""
        return Call(self._none, "replace", self._data, self._args(self._head, messages))

    def splice_prefix(
        self,
        drop_count: int,
        summary: Message | Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        lock_token: str | None = None,
    ) -> Call[int]:
        """Replace the first ``drop_count`` messages with ``summary``; replies how many."""
        summaries = [summary] if isinstance(summary, Message) else list(summary)
        if not summaries:
            raise ValueError("splice_prefix needs at least one summary message")
        if drop_count < 0:
            raise ValueError(f"drop_count must be >= 0, got {drop_count}")
        ids = [] if expected_ids is None else list(expected_ids)
        if expected_ids is not None and len(ids) != drop_count:
            raise ValueError(f"expected_ids names {len(ids)} messages, drop_count is {drop_count}")
        if lock_token == "":
            raise ValueError("lock_token must be a non-empty string or None")
        head = (drop_count, lock_token or "", int(expected_ids is not None), *ids, self.ttl_ms)
        args = self._args(head, summaries, summary=True)
        return Call(
            self._count, script="splice_prefix", keys=(*self.keys.data, self.keys.lock), args=args
        )

    def truncate(self, n: int) -> Call[int]:
        """Keep at most ``n`` messages; the reply is the number removed."""
        if n < 0:
            raise ValueError(f"truncate keeps n >= 0 messages, got {n}")
        return Call(self._count, script="truncate", keys=self.keys.data, args=(n, self.ttl_ms))

    def record_input_tokens(self, n: int) -> Call[None]:
        """Make ``n`` (the LLM's reported input tokens) the baseline."""
        if n < 0:
            raise ValueError(f"input tokens must be >= 0, got {n}")
        return Call(self._none, script="record_tokens", keys=self.keys.data, args=(n, self.ttl_ms))

    def delete(self) -> Call[bool]:
        """Remove every key of the conversation; the reply is whether anything existed."""
        return Call(lambda reply: int(reply) > 0, command=("DEL", *self.keys.all))

    # -- reads --------------------------------------------------------------------------------

    def token_estimate(self) -> Call[int | None]:
        """O(1): baseline + tokens since, or the whole history's count; None when empty."""
        return Call(self._estimate, command=("HMGET", self.keys.meta, "total", "baseline", "mark"))

    def _estimate(self, reply: Any) -> int | None:
        """``baseline + total - mark``: the tokens appended since the baseline are what the
        total grew by after ``mark``, the total when the baseline was recorded."""
        try:
            total, baseline, mark = (int(v) if v is not None else None for v in reply)
        except ValueError as exc:
            raise self._context(
                CorruptHistoryError(f"meta hash holds a non-integer: {reply!r}")
            ) from exc
        if not total:
            return None
        if baseline is not None:
            return baseline + total - (mark or 0)
        return total

    def compaction_status(self) -> Call[tuple[int | None, CompactionState]]:
        """The token estimate and the compaction state, in one ``HMGET``."""
        return Call(
            self._status,
            command=("HMGET", self.keys.meta, "total", "baseline", "mark", "cstate"),
        )

    def _status(self, reply: Any) -> tuple[int | None, CompactionState]:
        try:
            state = CompactionState.decode(reply[3])
        except ValueError as exc:
            raise self._context(
                CorruptHistoryError(f"meta field cstate is not a compaction state: {reply[3]!r}")
            ) from exc
        return self._estimate(reply[:3]), state

    def length(self) -> Call[int]:
        """Number of live messages."""
        return Call(int, command=("LLEN", self.keys.msgs))

    def entries(self, start: int = 0, stop: int = -1) -> Call[list[Entry]]:
        """Stored entries from ``start`` to ``stop`` inclusive (LRANGE semantics)."""
        return Call(self._decode, command=("LRANGE", self.keys.msgs, start, stop))

    def messages(self, start: int = 0, stop: int = -1) -> Call[list[Message]]:
        """Messages from ``start`` to ``stop`` inclusive (LRANGE semantics)."""
        return Call(self._messages, command=("LRANGE", self.keys.msgs, start, stop))

    def _messages(self, raw: Sequence[bytes | str]) -> list[Message]:
        return [entry.message for entry in self._decode(raw)]

    def tail(self, n: int) -> Call[list[Message]]:
        """The last ``n`` messages."""
        if n < 0:
            raise ValueError(f"tail needs n >= 0, got {n}")
        if n == 0:
            return Call(self._messages, command=("LRANGE", self.keys.msgs, 1, 0))
        return self.messages(-n, -1)

    def range(self, start: int = 0, stop: int | None = None) -> Call[list[Message]]:
        """Messages ``[start:stop]`` with Python slice bounds (negative counts from the end)."""
        if stop == 0:
            return Call(self._messages, command=("LRANGE", self.keys.msgs, 1, 0))
        return self.messages(start, -1 if stop is None else stop - 1)

    def transcript(self) -> Call[list[Message]]:
        """Archived originals then live messages, summaries left out: the full record."""
        return Call(self._transcript, script="transcript", keys=(self.keys.msgs, self.keys.archive))

    def _transcript(self, reply: Any) -> list[Message]:
        archived, live = reply
        return [e.message for e in self._decode([*archived, *live]) if not e.summary]

    # -- compaction state ---------------------------------------------------------------------

    def compaction_event(
        self, event: Event | str, value: int = 0, freed: int = 0
    ) -> Call[CompactionState]:
        """Apply ``event`` to the stored compaction state atomically; the reply is the new state."""
        return Call(
            self._state,
            script="compaction_state",
            keys=(self.keys.meta,),
            args=(event, value, freed),
        )

    def _state(self, reply: Any) -> CompactionState:
        raw = _text(self._checked(reply))
        return CompactionState.decode(raw)

    def take_warning(self) -> Call[bool]:
        """Move ``Exhausted{warned: false}`` to ``{warned: true}``; True only for the one caller
        that did, so the one-shot warning is given once however many pods race."""
        return Call(
            self._won, script="compaction_state", keys=(self.keys.meta,), args=("warned", 0, 0)
        )

    def _won(self, reply: Any) -> bool:
        if isinstance(reply, list) and ERRORS.get(int(reply[0])) is InvalidTransition:
            return False
        self._checked(reply)
        return True

    def exhausted_warning(self, estimate: int | None, policy: CompactionPolicy) -> str:
        """The one-shot warning for a conversation compaction can no longer shrink."""
        return (
            f"conversation {self.namespace}/{self.conversation_id} is exhausted: compaction "
            f"cannot bring it below the hard limit ({estimate} tokens, hard limit "
            f"{policy.hard_tokens}); start a new conversation or raise the model's budget"
        )

    def compaction_stats(self) -> Call[CompactionStats]:
        """How many compactions the conversation has had and the tokens they freed."""
        return Call(self._stats, command=("HMGET", self.keys.meta, "compactions", "tokens_freed"))

    def _stats(self, reply: Any) -> CompactionStats:
        try:
            compactions, freed = (int(v) if v is not None else 0 for v in reply)
        except ValueError as exc:
            raise self._context(
                CorruptHistoryError(f"meta hash holds a non-integer counter: {reply!r}")
            ) from exc
        return CompactionStats(compactions, freed)

    def claim_compaction(self, job_id: str, now_ms: int, stale_ms: int) -> Call[bool]:
        """Reserve the one pending compaction; the reply is whether this caller got it."""
        return Call(
            self._flag,
            script="claim_compaction",
            keys=(self.keys.meta,),
            args=(job_id, now_ms, stale_ms),
        )

    def release_claim(self, job_id: str) -> Call[bool]:
        """Drop the pending-compaction claim if it is still ``job_id``'s."""
        return Call(self._flag, script="release_claim", keys=(self.keys.meta,), args=(job_id,))

    def _flag(self, reply: Any) -> bool:
        return int(self._checked(reply)) == 1

    def compaction_job(self, policy: CompactionPolicy) -> CompactionJob:
        """The job to enqueue for this conversation: a fresh id and a plain-JSON payload."""
        return CompactionJob(
            job_id=f"rh-compact-{uuid.uuid4().hex}",
            payload={
                "namespace": self.namespace,
                "conversation_id": self.conversation_id,
                "prefix": self.prefix,
                "policy": policy.model_dump(mode="json"),
            },
            claim_ms=round(policy.claim_ttl_seconds * 1000),
            timeout=policy.job_timeout_seconds,
        )


class CompactionStats(NamedTuple):
    """A conversation's compaction counters, kept in its meta hash by the state script."""

    compactions: int
    """Successful compactions so far."""
    tokens_freed: int
    """Tokens those compactions removed from the live history, net of their summaries."""


@dataclass(frozen=True, slots=True)
class CompactionJob:
    """An RQ job request: its id (no ``:``) and its JSON-serializable keyword arguments."""

    job_id: str
    payload: dict[str, Any]
    claim_ms: int
    timeout: int

    def enqueue(self, queue: Any) -> None:
        """Enqueue on an RQ ``queue`` that uses ``JSONSerializer`` (checked: no pickle)."""
        try:
            json.loads(queue.serializer.dumps({"probe": 1}))
        except (ValueError, UnicodeDecodeError, AttributeError) as exc:
            raise ValueError(
                "the compaction queue must use rq.serializers.JSONSerializer, so no pickle "
                "crosses the queue"
            ) from exc
        queue.enqueue_call(
            COMPACTION_FUNCTION,
            kwargs=self.payload,
            job_id=self.job_id,
            timeout=self.timeout,
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
        )
