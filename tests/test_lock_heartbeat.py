"""The compaction lock's heartbeat: outages retried, the lock given up in time, never trusted late.

The heartbeat's loop runs here in the test's own thread on an injected clock and
wait, so minutes of lock time pass in microseconds; :func:`run_compaction` is
then run with its real heartbeat thread, on fakeredis and on a real Redis.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fakeredis
import pytest
import redis
from redis.exceptions import BusyLoadingError, LockNotOwnedError, ResponseError
from samples import turns

from redis_history import Message, RedisHistory
from redis_history.compaction.run import CompactionResult, _Heartbeat, run_compaction
from redis_history.compaction_policy import CompactionContext, CompactionPolicy
from redis_history.compaction_state import CompactionState

TTL = 3.0
"""The lock's TTL in the unit tests: beats every 1 s, retries every 0.15 s, margin 0.5 s."""
START = 1000.0
WAIT = 30.0
"""Seconds a test thread may wait for an event before the test fails."""


class FakeTime:
    """A clock that moves only when the heartbeat waits or an extension takes time."""

    def __init__(self, until: float = float("inf")) -> None:
        self.now = START
        self.until = until
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, stopped: threading.Event, seconds: float) -> bool:
        """Let ``seconds`` pass; report a stop once the clock reaches ``until``."""
        self.waits.append(round(seconds, 6))
        self.now += seconds
        return stopped.is_set() or self.now >= self.until


Outcome = Exception | float | None
"""What one extension does: raise this, or take this many seconds and succeed (None: at once)."""


class ScriptedLock:
    """A lock whose extensions follow a script, then succeed; it records when each was sent."""

    name = "rh:default:{c}:lock"

    def __init__(self, time: FakeTime, outcomes: Sequence[Outcome] = (), *, then: Outcome = None):
        self.time = time
        self.outcomes = list(outcomes)
        self.then = then
        self.sent: list[float] = []

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        assert (additional_time, replace_ttl) == (TTL, True)
        self.sent.append(self.time.now)
        outcome = self.outcomes.pop(0) if self.outcomes else self.then
        if isinstance(outcome, Exception):
            raise outcome
        self.time.now += outcome or 0.0
        return True


def heartbeat(time: FakeTime, lock: ScriptedLock) -> _Heartbeat:
    """A heartbeat on the fake clock for a lock acquired at START."""
    return _Heartbeat(lock, TTL, since=START, clock=time.clock, wait=time.wait)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """The messages the compaction module logs (its logger may not propagate to caplog)."""
    records: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("redis_history.compaction.run")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield records
    log.removeHandler(handler)
    log.setLevel(level)


def test_transient_errors_are_retried_and_the_lock_is_kept(warnings: list[str]) -> None:
    """Connection errors, timeouts and a loading server are retried sooner; the lock stays held."""
    time = FakeTime(until=START + 10)
    errors = [redis.ConnectionError("reset"), redis.TimeoutError("slow"), BusyLoadingError("load")]
    lock = ScriptedLock(time, [None, *errors])
    beat = heartbeat(time, lock)
    beat.run()
    assert not beat.lost
    assert beat.reason is None
    assert time.waits[:6] == [1.0, 1.0, 0.15, 0.15, 0.15, 1.0], "retried sooner, then as usual"
    assert lock.sent[1:5] == pytest.approx([START + 2.0, START + 2.15, START + 2.3, START + 2.45])
    assert time.now >= START + 10, "it beat on until stopped"
    assert sum("could not extend" in w for w in warnings) == 1, "one warning for the outage"
    assert sum("again after 0.4s" in w for w in warnings) == 1


def test_errors_until_the_margin_give_the_lock_up(warnings: list[str]) -> None:
    """An outage that lasts until less than the margin is left loses the lock, on its own."""
    time = FakeTime()
    lock = ScriptedLock(time, then=redis.ConnectionError("refused"))
    beat = heartbeat(time, lock)
    beat.run()  # returns by itself: the loop gave up
    assert beat.lost
    assert beat.reason == "it was not extended in time"
    assert max(lock.sent) < START + TTL - TTL / 6, "never tried to trust the last half second"
    assert len(lock.sent) == 11, "one beat and ten retries, 0.15 s apart"
    assert time.now < START + TTL, "given up while the lock still stood"
    assert any("gave up the compaction lock" in w for w in warnings)


def test_a_refused_extension_loses_the_lock_at_once() -> None:
    """Not-owned (another token, or expired) means lost, however much time seemed left."""
    time = FakeTime()
    lock = ScriptedLock(time, [None, LockNotOwnedError("no longer owned")])
    beat = heartbeat(time, lock)
    beat.run()
    assert beat.lost
    assert beat.reason is not None
    assert "refused" in beat.reason
    assert len(lock.sent) == 2
    assert time.now == START + 2.0


def test_an_unexpected_error_loses_the_lock_and_is_logged_whole(warnings: list[str]) -> None:
    """An error that is no outage (an ACL refusal) is not retried: lost, reported."""
    time = FakeTime()
    beat = heartbeat(time, ScriptedLock(time, [ResponseError("NOPERM no permissions")]))
    beat.run()
    assert beat.lost
    assert "NOPERM" in str(beat.reason)
    assert any("NOPERM" in w for w in warnings)


def test_an_extension_that_answers_too_late_is_not_trusted() -> None:
    """An extension stuck on a paused store until past the margin counts from when it was sent."""
    time = FakeTime()
    lock = ScriptedLock(time, [TTL])  # sent at +1 s, answered at +4 s
    beat = heartbeat(time, lock)
    beat.run()
    assert beat.lost
    assert lock.sent == [START + 1.0]


def test_the_verdict_needs_no_heartbeat_thread() -> None:
    """With the beating thread stuck, the lock is lost by the clock alone; lost stays lost."""
    time = FakeTime()
    beat = heartbeat(time, ScriptedLock(time))
    time.now = START + TTL - TTL / 6 - 0.01
    assert not beat.lost
    time.now += 0.01
    assert beat.lost
    beat._extended(time.now)  # a late success cannot take the verdict back
    assert beat.lost


# -- run_compaction with its real heartbeat thread ---------------------------------------------

POLICY = CompactionPolicy(soft_tokens=50, hard_tokens=10_000, keep_last_turns=1, min_messages=2)


class Gate:
    """A summarizer that announces itself, then blocks until the test opens the gate."""

    def __init__(self, during: Callable[[], None] = lambda: None) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.during = during

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        self.started.set()
        self.during()
        assert self.go.wait(WAIT), "the test never opened the gate"
        return "Previously: a summary"


def spied(history: RedisHistory) -> list[int]:
    """Record every write-back attempt on ``history`` (and let none through unrecorded)."""
    calls: list[int] = []
    splice = history.splice_prefix

    def spy(drop_count: int, summary: Message, **options: Any) -> int:
        calls.append(drop_count)
        return splice(drop_count, summary, **options)

    history.splice_prefix = spy  # type: ignore[assignment]
    return calls


def compact_in_thread(
    history: RedisHistory, summarizer: Gate, policy: CompactionPolicy, clock: Callable[[], float]
) -> Any:
    """Start run_compaction in a thread; the future's result is its CompactionResult."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(run_compaction, history, summarizer, policy, clock=clock)
    pool.shutdown(wait=False)
    return future


def test_a_lock_that_ran_out_during_the_summary_stops_the_compaction(client: redis.Redis) -> None:
    """No extension for longer than the lock can be trusted: lock_lost, no write-back attempted."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    writes = spied(history)
    time = FakeTime()

    def outlast_the_lock() -> None:
        time.now += POLICY.lock_ttl_seconds  # real beats are 20 s apart: none gets in

    gate = Gate(outlast_the_lock)
    gate.go.set()
    assert run_compaction(history, gate, POLICY, clock=time.clock) == CompactionResult("lock_lost")
    assert writes == []
    assert history.entries() == before
    assert history.compaction_state() == CompactionState.ready()
    assert not client.exists(history.keys.lock), "still ours in Redis, so released"


def test_a_lock_taken_during_the_summary_stops_the_compaction(
    client: redis.Redis, warnings: list[str]
) -> None:
    """The heartbeat's extension is refused once another token holds the lock: lock_lost at
    once (the clock is frozen, so only the refusal can tell), and no write-back attempted."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    writes = spied(history)
    quick = POLICY.model_copy(update={"lock_ttl_seconds": 0.3})  # real beats 0.1 s apart
    gate = Gate()
    future = compact_in_thread(history, gate, quick, clock=lambda: START)
    assert gate.started.wait(WAIT)
    client.set(history.keys.lock, "another-worker", px=60_000)
    wait_for_log(warnings, "refused")  # the heartbeat's next beat
    gate.go.set()
    assert future.result(WAIT) == CompactionResult("lock_lost")
    assert writes == []
    assert history.entries() == before
    assert client.get(history.keys.lock) == b"another-worker", "the other worker's lock stands"
    assert any("stopped before its write-back" in w for w in warnings)


def test_an_outage_during_the_summary_is_ridden_out(warnings: list[str]) -> None:
    """The store unreachable for some beats: the heartbeat thread survives, extends again,
    and the compaction writes back."""
    server = fakeredis.FakeServer()
    client = fakeredis.FakeRedis(server=server)
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    quick = POLICY.model_copy(update={"lock_ttl_seconds": 0.3})
    gate = Gate()
    future = compact_in_thread(history, gate, quick, clock=lambda: START)
    assert gate.started.wait(WAIT)
    server.connected = False
    wait_for_log(warnings, "could not extend")
    server.connected = True
    wait_for_log(warnings, "again after")
    gate.go.set()
    result = future.result(WAIT)
    assert result.status == "compacted"
    assert history.snapshot()[0].content.endswith("Previously: a summary")


def wait_for_log(warnings: list[str], text: str) -> None:
    """Block until the compaction module has logged a message containing ``text``."""
    done = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if any(text in w for w in warnings):
            return
        done.wait(0.01)
    pytest.fail(f"nothing logged {text!r}")
