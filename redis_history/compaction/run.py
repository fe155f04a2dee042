"""One compaction of one conversation: lock, snapshot, cut, compact, fenced write-back.

What replaces the prefix is a :class:`~redis_history.compaction.compactors.Compactor`'s
choice (by default a summary, :class:`~redis_history.compaction.compactors.SummarizingCompactor`);
the lock, the cut, the check of its result and the write-back are the same for all.

This is the worker's job without RQ (``jobs.py`` wraps it), so it can be run
and tested directly. The lock is redis-py's :class:`redis.lock.Lock` (random
token, ``SET NX PX``, compare-and-delete release), extended by a heartbeat
while the summarizer runs; the write-back passes the token to
``splice_prefix``, whose script refuses it if the lock changed hands.

The heartbeat rides out short outages of the store: it retries a failed
extension until less than a safety margin of the lock's time is left (counted
from the last extension that got through), and only then gives the lock up. A
compaction whose heartbeat gave up stops before its write-back and reports
``lock_lost``: by then another worker may hold the lock, and the fencing in the
write-back is the last line of defence, not the first.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import takewhile
from typing import Any, Literal

from redis import exceptions as redis_errors
from redis.exceptions import LockError, LockNotOwnedError
from redis.lock import Lock

from redis_history.compaction.compactors import (
    Compactor,
    CompactorRequest,
    SummarizingCompactor,
    ToolOutputElider,
)
from redis_history.compaction.summarizers import Summarizer
from redis_history.compaction_policy import CompactionContext, CompactionPolicy
from redis_history.errors import (
    CompactorError,
    InvalidMessageError,
    InvalidTransitionError,
    LockLostError,
    StaleSnapshotError,
    StoreUnavailableError,
)
from redis_history.models import Message
from redis_history.roles import RoleState
from redis_history.store.codec import Entry
from redis_history.store.core import lock_call
from redis_history.store.history import RedisHistory
from redis_history.tokens import message_tokens
from redis_history.turns import Turn, group_entries, group_turns
from redis_history.wire import RedisFailure
from redis_history.wire.lane import send

__all__ = ["CompactionResult", "Cut", "choose_cut", "run_compaction"]

Status = Literal["compacted", "skipped", "busy", "exhausted", "stale", "lock_lost"]

logger = logging.getLogger(__name__)

_TRANSIENT: tuple[type[BaseException], ...] = (
    redis_errors.ConnectionError,  # refused, reset, killed; also BusyLoadingError after a restart
    redis_errors.TimeoutError,
    TimeoutError,  # a socket timeout redis-py let through unwrapped
    StoreUnavailableError,
    redis_errors.ClusterDownError,  # a cluster failing over: unavailable, not wrong
    redis_errors.TryAgainError,
    redis_errors.ReadOnlyError,
    redis_errors.RedisClusterException,  # "all nodes down"; not a RedisError
)
"""Errors an extension is retried after: the store may answer again before the lock expires."""


@dataclass(frozen=True, slots=True)
class Cut:
    """Where to cut: replace ``messages[:drop]`` by a summary of ``messages[head:drop]``."""

    head: int
    drop: int


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What one compaction job did."""

    status: Status
    dropped: int = 0
    tokens_freed: int = 0


def choose_cut(
    messages: Sequence[Message], tokens: Sequence[int], policy: CompactionPolicy
) -> Cut | None:
    """The latest turn boundary that keeps the policy's tail verbatim, or ``None``.

    Turns start at user messages; a user message cannot come while tool calls
    are open, so a cut there never splits a tool call from its result. The log is
    read by the lenient role rules, which take what a pod writing by either rules
    left; a user message right after another (a question sent in two) starts no turn
    here, so a cut never parts the two.

    Raises:
        InvalidMessageError: the log breaks role order or tool pairing.
    """
    RoleState().advance_all(messages, roles="lenient")
    head = 1 if messages and messages[0].role == "system" else 0
    starts = [
        i
        for i, m in enumerate(messages)
        if m.role == "user" and i > head and messages[i - 1].role != "user"
    ]
    if policy.keep_last_turns:
        starts = starts[: len(starts) - policy.keep_last_turns + 1]
    starts = [i for i in starts if sum(tokens[i:]) >= policy.keep_last_tokens]
    if not starts or starts[-1] - head < policy.min_messages:
        return None
    return Cut(head=head, drop=starts[-1])


class _RetrySafeLock(Lock):
    """redis-py's lock, whose acquire survives its own retry: a ``SET NX`` re-sent after its
    reply was lost finds the key holding this very token, and that is the lock taken. Its
    extension and release run the store's own script (``lua/lock-1.lua``), as a function
    where the user may run only the store's functions."""

    def do_acquire(self, token: str) -> bool:
        if super().do_acquire(token):
            return True
        return bool(_as_bytes(self.redis.get(self.name)) == _as_bytes(token))

    def do_release(self, expected_token: str) -> None:
        self._holds(expected_token, 0, "release")

    def do_extend(self, additional_time: float, replace_ttl: bool) -> Literal[True]:
        if not replace_ttl:
            raise LockError("the compaction lock is only ever extended to a new TTL")
        return self._holds(self.local.token, round(additional_time * 1000), "extend")

    def do_reacquire(self) -> Literal[True]:
        assert self.timeout is not None
        return self._holds(self.local.token, round(self.timeout * 1000), "reacquire")

    def _holds(self, token: Any, ttl_ms: int, what: str) -> Literal[True]:
        text = token.decode() if isinstance(token, bytes) else str(token)
        if not send(self.redis, lock_call(self.name, text, ttl_ms)):
            raise LockNotOwnedError(f"cannot {what} a lock no longer owned", lock_name=self.name)
        return True


def _as_bytes(value: Any) -> Any:
    return value.encode() if isinstance(value, str) else value


class _Heartbeat:
    """Extends the lock every third of its TTL, and knows when it can no longer be trusted.

    The lock is held at least ``ttl`` past the moment the last successful extension
    (or the acquisition) was *sent*: the server applied it no earlier. Until less
    than :attr:`MARGIN` of that time is left, a transient error (the store unreachable,
    timing out, failing over) is retried every ``ttl / 20``; then the lock is lost.
    A refused extension (the token is no longer the lock's) loses it at once, as
    does an unexpected error, which is logged whole. A lost lock stays lost.

    ``clock`` and ``wait`` are injected so tests can drive :meth:`run` without a
    thread or a real second passing: ``wait(stopped, seconds)`` returns whether
    the heartbeat was stopped meanwhile, like :meth:`threading.Event.wait`.
    """

    INTERVAL = 1 / 3
    """Fraction of the TTL between two extensions while all is well."""
    RETRY = 1 / 20
    """Fraction of the TTL between two attempts after a transient error."""
    MARGIN = 1 / 6
    """Fraction of the TTL that must be left for the lock to be trusted."""

    def __init__(
        self,
        lock: Any,
        ttl: float,
        *,
        since: float,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
    ) -> None:
        self._lock, self._ttl, self._clock, self._wait = lock, ttl, clock, wait
        self._margin = ttl * self.MARGIN
        self._trusted_until = since + ttl - self._margin
        self._reason: str | None = None
        self._guard = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self.run, name=f"heartbeat {lock.name}", daemon=True)

    @property
    def lost(self) -> bool:
        """Whether the lock can no longer be trusted: refused, or not extended in time.

        Also true while an extension hangs past the margin (a paused store), so the
        verdict never waits for the store.
        """
        with self._guard:
            if self._reason is None and self._clock() >= self._trusted_until:
                self._give_up("it was not extended in time")
            return self._reason is not None

    @property
    def reason(self) -> str | None:
        """Why the lock was given up, if it was."""
        return self._reason

    def _give_up(self, reason: str, *, exc_info: bool = False) -> None:
        """Mark the lock lost (the first reason sticks); the caller holds ``_guard``."""
        if self._reason is None:
            self._reason = reason
            if not self._stopped.is_set():
                logger.warning(
                    "gave up the compaction lock %s: %s", self._lock.name, reason, exc_info=exc_info
                )

    def _extended(self, sent: float) -> None:
        with self._guard:
            if self._reason is None:
                self._trusted_until = max(self._trusted_until, sent + self._ttl - self._margin)

    def run(self) -> None:
        """Extend until stopped or lost (the heartbeat thread's body)."""
        delay = self._ttl * self.INTERVAL
        failing_since: float | None = None
        while not self._wait(self._stopped, delay):
            if self.lost:
                return
            sent = self._clock()
            try:
                self._lock.extend(self._ttl, replace_ttl=True)
            except LockError as exc:
                with self._guard:
                    self._give_up(f"its extension was refused ({exc})")
                return
            except _TRANSIENT as exc:
                if failing_since is None:
                    failing_since = sent
                    logger.warning(
                        "could not extend the compaction lock %s (%s: %s); retrying until "
                        "less than %.1fs of it would be left",
                        self._lock.name,
                        type(exc).__name__,
                        exc,
                        self._margin,
                    )
                delay = self._ttl * self.RETRY
            except Exception as exc:  # reported whole, and the compaction stops
                with self._guard:
                    reason = f"its extension failed ({type(exc).__name__}: {exc})"
                    self._give_up(reason, exc_info=True)
                return
            else:
                self._extended(sent)
                if failing_since is not None:
                    logger.info(
                        "extended the compaction lock %s again after %.1fs of errors",
                        self._lock.name,
                        self._clock() - failing_since,
                    )
                    failing_since = None
                delay = self._ttl * self.INTERVAL

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        # An extension hanging on a paused store is not waited for long: the thread is
        # a daemon, and the lock it would extend is released (or expired) by then.
        self._thread.join(1.0)


def run_compaction(
    history: RedisHistory,
    summarizer: Summarizer,
    policy: CompactionPolicy,
    *,
    compactor: Compactor | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> CompactionResult:
    """Compact ``history`` once under its lock; never raises for a lost race, reports it.

    Under the lock, the policy is asked again whether compaction is due: a job
    that waited in the queue while another compacted the conversation, or a
    duplicate, finds nothing to do and reports ``skipped`` without touching the
    state (only a compaction that is due and cannot help exhausts it). A heartbeat
    extends the lock while the compactor runs; if it had to give the lock up (its
    extension refused, or the store unreachable until the lock's time ran short),
    the compaction stops before its write-back and reports ``lock_lost``.

    The compactor is given the whole turns before the policy's tail and returns
    what replaces them; that is checked against the tail and written back by the
    fenced ``splice_prefix`` (every message it writes is marked as written by a
    compaction, so the transcript shows the archived originals instead). A
    compactor with nothing to do (``None`` or nothing returned) exhausts the
    state, as a conversation too short to cut does.

    Args:
        history: the conversation.
        summarizer: the worker's summarizer, handed to the compactor (the default
            compactor summarizes the prefix with it).
        policy: thresholds, the cut, and the lock's TTL.
        compactor: decides what replaces the prefix; ``None`` for
            :class:`~redis_history.compaction.compactors.SummarizingCompactor`.
        clock: the monotonic clock the heartbeat measures the lock's time with (tests
            inject one).

    Returns:
        What happened: ``compacted``, ``skipped``, ``busy``, ``exhausted``, ``stale``
        or ``lock_lost``.

    Raises:
        InvalidMessageError: the stored log is malformed (role order, tool pairing).
        CompactorError: the compactor returned what cannot replace the prefix; nothing
            was written.
        SummarizerError: the summarizer returned no text; nothing was written.
        HistoryError: Redis refused or was unreachable; the compactor's and summarizer's
            own errors pass through.
    """
    compactor = SummarizingCompactor() if compactor is None else compactor
    lock = history.client.lock(
        history.keys.lock,
        timeout=policy.lock_ttl_seconds,
        blocking=False,
        thread_local=False,
        lock_class=_RetrySafeLock,
    )
    asked = clock()  # the lock's TTL runs from no earlier than this
    try:
        acquired = lock.acquire()
    except RedisFailure as exc:  # the lock is redis-py's: its errors are not typed yet
        raise history.core.wrap(exc) from exc
    if not acquired:
        return CompactionResult("busy")
    token = lock.local.token
    token = token.decode() if isinstance(token, bytes) else str(token)
    try:
        with _Heartbeat(lock, policy.lock_ttl_seconds, since=asked, clock=clock) as heartbeat:
            if not policy.due(history.compaction_facts()):
                return CompactionResult("skipped")
            for attempt in range(2):
                try:
                    return _compact_once(
                        history, _Plugins(compactor, summarizer), policy, token, heartbeat
                    )
                except StaleSnapshotError:
                    if attempt:
                        return CompactionResult("stale")
                except LockLostError:
                    return CompactionResult("lock_lost")
            raise AssertionError("unreachable")
    finally:
        # Not ours any more, or the store is down: either way the lock expires by itself.
        with contextlib.suppress(LockError, *_TRANSIENT):
            lock.release()


def _lock_lost(history: RedisHistory, heartbeat: _Heartbeat) -> CompactionResult:
    logger.warning(
        "compaction of %s/%s stopped before its write-back: the lock was given up (%s)",
        history.namespace,
        history.conversation_id,
        heartbeat.reason,
    )
    return CompactionResult("lock_lost")


@dataclass(frozen=True, slots=True)
class _Plugins:
    """The compactor, and the worker's summarizer it is handed."""

    compactor: Compactor
    summarizer: Summarizer


def _compact_once(
    history: RedisHistory,
    plugins: _Plugins,
    policy: CompactionPolicy,
    token: str,
    heartbeat: _Heartbeat,
) -> CompactionResult:
    first = _cut_and_write(
        history, plugins.compactor, plugins, policy, token=token, heartbeat=heartbeat
    )
    if isinstance(first, CompactionResult):
        return first
    dropped, freed = (first.dropped, first.freed) if isinstance(first, _Written) else (0, 0)
    why = None if isinstance(first, _Written) else first
    if history.compaction_facts().tokens >= policy.hard_tokens:
        # Nothing the policy's cut may take brings it under the hard limit: shrink the bulky
        # tool output of every turn but the newest rather than let the list grow for ever.
        relaxed = policy.model_copy(update={"keep_last_turns": 1, "keep_last_tokens": 0})
        second = _cut_and_write(
            history,
            ToolOutputElider(),
            plugins,
            relaxed,
            token=token,
            heartbeat=heartbeat,
            step=" elided",
        )
        if isinstance(second, CompactionResult):
            return second
        if isinstance(second, _Written):
            dropped, freed = dropped + second.dropped, freed + second.freed
        if history.compaction_facts().tokens >= policy.hard_tokens:
            why = TAIL_OVER_HARD
    if dropped:
        with contextlib.suppress(InvalidTransitionError):  # moved meanwhile; the splice stands
            history.compaction_event("compacted", policy.cooldown_turns, freed)
        if freed == 0 and why is None:
            why = NOTHING_FREED
    if why is not None:
        _exhaust(history, why)
    return (
        CompactionResult("compacted", dropped, freed) if dropped else CompactionResult("exhausted")
    )


@dataclass(frozen=True, slots=True)
class _Written:
    """A cut written back: the messages it dropped and the tokens it freed."""

    dropped: int
    freed: int


def _cut_and_write(
    history: RedisHistory,
    compactor: Compactor,
    plugins: _Plugins,
    policy: CompactionPolicy,
    *,
    token: str,
    heartbeat: _Heartbeat,
    step: str = "",
) -> CompactionResult | _Written | int:
    """The policy's cut of the stored conversation, compacted by ``compactor`` and written
    back (``step`` names the write among the job's); or why nothing was written
    (``NO_CUT``, ``NOTHING_FREED``); or the result that ends the job (the lock lost)."""
    entries = history.entries()
    messages = [e.message for e in entries]
    tokens = [e.tokens for e in entries]
    cut = choose_cut(messages, tokens, policy)
    if heartbeat.lost:  # neither a state change nor a summary is worth making without it
        return _lock_lost(history, heartbeat)
    if cut is None:
        return NO_CUT
    replaced = sum(tokens[: cut.drop])
    context = CompactionContext(history.namespace, history.conversation_id, policy)
    request = CompactorRequest(
        context=context,
        turns=tuple(group_entries(entries[: cut.drop], roles="lenient")),
        tokens=tuple(tokens[: cut.drop]),
        token_counter=history.token_counter,
        summarizer=plugins.summarizer,
    )
    result = compactor.compact(request)
    if heartbeat.lost:
        return _lock_lost(history, heartbeat)
    replacement = _replacement(history, compactor, result, entries[cut.drop :])
    if not replacement or replacement == messages[: cut.drop]:  # nothing it would change
        return NOTHING_FREED
    dropped = history.splice_prefix(
        cut.drop,
        replacement,
        expected_ids=[m.id for m in messages[: cut.drop]],
        lock_token=token,
        archive_max_messages=policy.archive_max_messages,
        archive_max_bytes=policy.archive_max_bytes,
        # Kept messages keep their ids, so the replacement's ids no longer name this write
        # alone; the lock token does (a refused attempt is not recorded, a retried one is).
        op_id=f"compaction {token}{step}",
    )
    written = sum(message_tokens(m, history.token_counter) for m in replacement)
    return _Written(dropped, max(0, replaced - written))


def _replacement(
    history: RedisHistory, compactor: Compactor, result: object, tail: Sequence[Entry]
) -> list[Message]:
    """The messages a compactor's ``result`` puts in place of the prefix, checked to fit.

    Raises:
        CompactorError: ``result`` is not messages and turns, or they and the tail would
            not be a well-formed history (role order, tool pairing, a message id twice).
    """

    def refused(problem: str) -> CompactorError:
        return CompactorError(
            f"{type(compactor).__name__}.compact returned {problem}; nothing was written",
            conversation_id=history.conversation_id,
            namespace=history.namespace,
        )

    if result is None:
        return []
    if isinstance(result, (str, bytes, Message, Turn)) or not isinstance(result, Sequence):
        raise refused(f"{type(result).__name__}, not a sequence of messages and turns")
    replacement: list[Message] = []
    for index, item in enumerate(result):
        if isinstance(item, Turn):
            replacement += item.to_messages()
        elif isinstance(item, Message):
            replacement.append(item)
        else:
            raise refused(f"{type(item).__name__} at index {index}, not a Message or Turn")
    if not replacement:
        return []
    ids = [m.id for m in replacement] + [e.message.id for e in tail]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise refused(f"message ids the history would hold twice: {', '.join(twice[:5])}")
    flagged = len(replacement) + sum(1 for _ in takewhile(lambda e: e.summary, tail))
    try:
        group_turns(
            [*replacement, *(e.message for e in tail)],
            summaries=flagged,
            allow_open=True,
            roles="lenient",
        )
    except InvalidMessageError as exc:
        raise refused(f"messages that do not fit before the tail: {exc}") from exc
    return replacement


NO_CUT, NOTHING_FREED, TAIL_OVER_HARD = 1, 2, 3
"""Why compaction gave up (``GAVE_UP``), recorded with the state."""


def _exhaust(history: RedisHistory, why: int) -> None:
    with contextlib.suppress(InvalidTransitionError):  # not reachable from Cooling
        history.compaction_event("exhausted", why)
