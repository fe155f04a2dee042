"""Real worker processes through outages: killed connections, a paused store, a restarted queue.

Each test runs its own redis-server(s), since it stops, kills or restarts them.
The store is reached with ``socket_timeout=0.5`` (in its URL), as a deployment
might configure it: a read on a paused store then fails after half a second
instead of redis-py's default five, which keeps these tests short. Workers run
``worker_doubles.Steady``, whose own Redis calls survive the outages, and which
counts compactions in flight: ``test:overlaps`` stays empty unless two overlap.
Nothing here asserts a duration; every wait is for an event, with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from test_workers import seeded
from worker_processes import DEADLINE, Workers, wait_for

from redis_history import CompactionPolicy, RedisHistory
from redis_history.compaction.jobs import compaction_queue
from redis_history.compaction_state import CompactionState
from redis_history.demo.server import RedisServer

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]


def policy(lock_ttl: float) -> CompactionPolicy:
    """A policy under which a seeded conversation is due, with a lock of ``lock_ttl`` seconds."""
    return CompactionPolicy(
        soft_tokens=100,
        hard_tokens=1_000_000,
        keep_last_turns=1,
        min_messages=2,
        cooldown_turns=0,
        lock_ttl_seconds=lock_ttl,
    )


@pytest.fixture
def store_server() -> Iterator[RedisServer]:
    """A store of this test's own, free to be paused."""
    with RedisServer() as server:
        yield server
        os.kill(server.pid or 0, signal.SIGCONT)  # in case the test failed while it was paused


@pytest.fixture
def store(store_server: RedisServer) -> Iterator[redis.Redis]:
    """The test's client on the store."""
    client = store_server.client()
    yield client
    client.close()


@pytest.fixture
def queue_server() -> Iterator[RedisServer]:
    """A queue Redis of the test's own, free to be killed and restarted."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def workers(store_server: RedisServer, store: redis.Redis, tmp_path: Path) -> Iterator[Workers]:
    """A launcher of workers on the test's store (and, unless told otherwise, its queue)."""
    launcher = Workers(store, f"{store_server.url}?socket_timeout=0.5", tmp_path)
    yield launcher
    launcher.stop_all()


def started(client: redis.Redis, name: str) -> list[dict[str, Any]]:
    """The summaries Steady has started for ``name``, one per call."""
    calls = [json.loads(raw) for raw in client.lrange(f"test:started:{name}", 0, -1)]
    return list({call["token"]: call for call in calls}.values())


def lock_watch(client: redis.Redis, key: str) -> Callable[[], str | None]:
    """A condition: ``extended`` once the lock's TTL goes up, ``gone`` once it is gone."""
    last = [client.pttl(key)]

    def check() -> str | None:
        now = client.pttl(key)
        if now < 0:
            return "gone"
        if now > last[0]:
            return "extended"
        last[0] = now
        return None

    return check


def compacted(history: RedisHistory) -> bool:
    """Whether the conversation starts with a summary now."""
    return bool(history.snapshot()[0].metadata.get("summary"))


def alive(pid: int) -> bool:
    """Whether a process (not yet reaped by its parent) exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_killed_connections_mid_summary_keep_the_lock_and_the_worker(
    workers: Workers, store: redis.Redis
) -> None:
    """Every store connection killed again and again for over a heartbeat period while a
    worker summarizes: its lock is kept, a second worker finds it busy, the compaction
    completes, and the worker serves the next job."""
    locked = policy(lock_ttl=3)
    history = seeded(store, "conv", 6)
    queue = compaction_queue(connection=store, name="redis-history")
    first = workers.start("Steady")
    assert history.maybe_compact(queue, locked)
    wait_for(lambda: started(store, "conv"), "the summary to start")
    token = store.get(history.keys.lock)
    assert wait_for(lock_watch(store, history.keys.lock), "a heartbeat") == "extended"

    kills, end = 0, time.monotonic() + 1.2  # the fault's length; nothing is timed
    while time.monotonic() < end or kills <= 10:  # and at least ten kills, however slow
        kills += int(store.client_kill_filter(_type="normal"))

    watch = lock_watch(store, history.keys.lock)
    assert wait_for(watch, "the lock's fate") == "extended", "the heartbeat gave up"
    assert store.get(history.keys.lock) == token
    queue(history.core.compaction_request(locked))
    second = workers.start("Steady", burst=True)
    assert second.wait(DEADLINE) == 0, workers.log(second)
    assert "busy" in workers.log(second), workers.log(second)

    store.set("test:release:conv", 1)
    wait_for(lambda: compacted(history), "the compaction to write back")
    wait_for(lambda: "compacted dropped=" in workers.log(first), "the worker to log it")
    later = seeded(store, "later", 6)
    store.set("test:release:later", 1)
    assert later.maybe_compact(queue, locked)
    wait_for(lambda: compacted(later), "the first worker to serve the next job")
    assert first.poll() is None, workers.log(first)
    assert store.smembers("test:overlaps") == set()
    assert "Traceback" not in workers.log(first), workers.log(first)


def pause(server: RedisServer, seconds: float) -> None:
    """SIGSTOP the server for ``seconds`` (the fault's length), then SIGCONT it."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(server.pid, signal.SIGCONT)


def test_a_store_paused_past_a_heartbeat_but_within_the_ttl_keeps_the_lock(
    workers: Workers, store: redis.Redis, store_server: RedisServer
) -> None:
    """A store frozen for longer than a heartbeat period (its extension times out) but less
    than the lock's TTL: the heartbeat extends again once it wakes, a second worker finds the
    lock busy, and the compaction completes; never two at once."""
    locked = policy(lock_ttl=5)  # beats 1.67 s apart; given up with under 0.83 s left
    history = seeded(store, "conv", 6)
    queue = compaction_queue(connection=store, name="redis-history")
    first = workers.start("Steady")
    assert history.maybe_compact(queue, locked)
    wait_for(lambda: started(store, "conv"), "the summary to start")
    token = store.get(history.keys.lock)
    assert wait_for(lock_watch(store, history.keys.lock), "a heartbeat") == "extended"

    pause(store_server, 2.6)  # the next beat's read times out in the pause, 0.5 s after it

    watch = lock_watch(store, history.keys.lock)
    assert wait_for(watch, "the lock's fate") == "extended", "the heartbeat gave up"
    assert store.get(history.keys.lock) == token
    queue(history.core.compaction_request(locked))
    second = workers.start("Steady", burst=True)
    assert second.wait(DEADLINE) == 0, workers.log(second)
    assert "busy" in workers.log(second), workers.log(second)
    store.set("test:release:conv", 1)
    wait_for(lambda: compacted(history), "the compaction to write back")
    wait_for(lambda: "compacted dropped=" in workers.log(first), "the worker to log it")
    assert store.smembers("test:overlaps") == set()


def test_a_store_paused_past_the_lock_ttl_stops_the_compaction_before_its_write_back(
    workers: Workers, store: redis.Redis, store_server: RedisServer
) -> None:
    """A store frozen past the lock's TTL: the heartbeat gives the lock up, and once the
    summary returns the compaction stops with lock_lost, attempting no write-back; the
    conversation is as it was."""
    locked = policy(lock_ttl=2)
    history = seeded(store, "conv", 6)
    before = history.entries()
    queue = compaction_queue(connection=store, name="redis-history")
    first = workers.start("Steady")
    assert history.maybe_compact(queue, locked)
    wait_for(lambda: started(store, "conv"), "the summary to start")

    pause(store_server, 3.0)

    store.set("test:release:conv", 1)
    wait_for(lambda: "lock_lost" in workers.log(first), "the compaction to report lock_lost")
    log = workers.log(first)
    assert "gave up the compaction lock" in log, log
    assert "stopped before its write-back" in log, log
    assert history.entries() == before
    assert history.compaction_state() == CompactionState.ready()
    wait_for(lambda: not store.exists(history.keys.lock), "the lock to be gone")
    assert first.poll() is None


def test_a_restarted_queue_redis_does_not_end_the_worker(
    workers: Workers, store: redis.Redis, queue_server: RedisServer
) -> None:
    """The queue's Redis killed while a job finishes (RQ cannot record it), then restarted;
    restarted again while the worker idles; killed for good, then SIGTERM: the worker
    serves a job after each restart, and shuts down cleanly in the outage."""
    workers.env["REDIS_HISTORY_QUEUE_URL"] = queue_server.url
    queue_client = queue_server.client()
    queue = compaction_queue(connection=queue_client, name="redis-history")
    worker = workers.start("Steady")
    history = seeded(store, "conv", 6)
    assert history.maybe_compact(queue, policy(lock_ttl=10))
    (call,) = wait_for(lambda: started(store, "conv"), "the summary to start")

    queue_server.kill()
    store.set("test:release:conv", 1)
    wait_for(lambda: compacted(history), "the write-back, to the store, which is up")
    wait_for(lambda: not alive(call["pid"]), "the work horse to end")
    wait_for(
        lambda: "unavailable" in workers.log(worker) or worker.poll() is not None,
        "the worker to notice the outage",
    )
    assert worker.poll() is None, workers.log(worker)

    def serves(name: str) -> None:
        later = seeded(store, name, 6)
        store.set(f"test:release:{name}", 1)
        assert later.maybe_compact(queue, policy(lock_ttl=10))
        wait_for(lambda: compacted(later), f"the worker to serve {name}")

    queue_server.start()
    serves("after-restart")
    queue_server.restart()  # while the worker idles
    serves("after-idle-restart")
    assert worker.poll() is None
    assert "unhandled exception" not in workers.log(worker)

    outages = workers.log(worker).count("unavailable")
    queue_server.kill()
    wait_for(lambda: workers.log(worker).count("unavailable") > outages, "the next outage")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(DEADLINE) == 0, workers.log(worker)
    assert "Traceback" not in workers.log(worker), workers.log(worker)
    queue_client.close()
