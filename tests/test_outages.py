"""Every failure a caller sees is a typed ``HistoryError``: outages are ``StoreUnavailableError``
(retry later) whatever redis-py raised for them; a server that forgot the scripts is no error."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from backends import SyncOverAsync
from faults import ClusterProxies
from redis import exceptions as redis_errors
from redis.backoff import NoBackoff
from redis.retry import Retry
from samples import turns

from redis_history import (
    AsyncRedisHistory,
    CompactionPolicy,
    Message,
    RedisHistory,
    StoreUnavailableError,
)
from redis_history.compaction.jobs import compaction_queue
from redis_history.demo.server import free_port

DUE = CompactionPolicy(soft_tokens=1, hard_tokens=2)

CALLS: dict[str, Callable[[Any], Any]] = {
    "append": lambda h: h.append(Message.user("u")),
    "append_many": lambda h: h.append_many(turns(1)[1:]),
    "replace": lambda h: h.replace(turns(1)),
    "splice_prefix": lambda h: h.splice_prefix(1, Message.system("s")),
    "truncate": lambda h: h.truncate(1),
    "rollback": lambda h: h.rollback(["m1"]),
    "record_input_tokens": lambda h: h.record_input_tokens(5),
    "snapshot": lambda h: h.snapshot(),
    "token_estimate": lambda h: h.token_estimate(),
    "transcript": lambda h: h.transcript(),
    "len": lambda h: h.len(),
    "advance_turn": lambda h: h.advance_turn(),
    "compaction_status": lambda h: h.compaction_status(),
    "set_ttl": lambda h: h.set_ttl(60),
    "delete": lambda h: h.delete(),
}


@pytest.mark.real_redis
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_method_is_store_unavailable_when_every_cluster_node_is_down(
    cluster_proxies: ClusterProxies, mode: str
) -> None:
    """With every node unreachable redis-py raises RedisClusterException (not a RedisError);
    each method raises StoreUnavailableError instead, sync and async."""
    runner = asyncio.Runner()
    if mode == "sync":
        client: Any = cluster_proxies.client()
        history: Any = RedisHistory(client, "c")
    else:
        client = runner.run(cluster_proxies.async_client())
        history = SyncOverAsync(AsyncRedisHistory(client, "c"), runner)
    history.append(Message.user("before the outage"))
    for proxy in cluster_proxies.proxies.values():
        proxy.refuse(True)
    try:
        for name, call in CALLS.items():
            with pytest.raises(StoreUnavailableError) as info:
                call(history)
            assert info.value.conversation_id == "c", name
    finally:
        if mode == "sync":
            client.close()
        else:
            runner.run(client.aclose())
        runner.close()


class Refusing:
    """A client whose every command fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def execute_command(self, *args: Any, **options: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        redis_errors.ClusterDownError("CLUSTERDOWN The cluster is down"),
        redis_errors.MasterDownError("MASTERDOWN Link with MASTER is down"),
        redis_errors.TryAgainError("TRYAGAIN Multiple keys request during rehashing"),
        redis_errors.ReadOnlyError("READONLY You can't write against a read only replica."),
        redis_errors.BusyLoadingError("LOADING Redis is loading the dataset in memory"),
        redis_errors.RedisClusterException("Redis Cluster cannot be connected."),
        redis_errors.TimeoutError("Timeout reading from socket"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_unavailable_replies_are_store_unavailable(error: Exception) -> None:
    """Replies that mean "unavailable now, retry" raise StoreUnavailableError, a ConnectionError."""
    history = RedisHistory(Refusing(error), "c")
    for call in CALLS.values():
        with pytest.raises(StoreUnavailableError) as info:
            call(history)
        assert info.value.__cause__ is error
        assert isinstance(info.value, ConnectionError)


@pytest.mark.real_redis
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_maybe_compact_with_the_queue_down_is_store_unavailable_and_releases_the_claim(
    real_redis: redis.Redis, redis_url: str, mode: str
) -> None:
    """A queue whose Redis cannot be reached makes maybe_compact raise StoreUnavailableError,
    and the claim is released, so the next call may enqueue once the queue is back."""
    history = RedisHistory(real_redis, "c", token_counter="heuristic")
    history.append_many(turns(2))
    dead = compaction_queue(
        connection=redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0)), name="q"
    )
    if mode == "sync":
        with pytest.raises(StoreUnavailableError, match="unavailable"):
            history.maybe_compact(dead, DUE)
    else:

        async def ask() -> None:
            client = redis.asyncio.Redis.from_url(redis_url)
            try:
                await AsyncRedisHistory(client, "c", token_counter="heuristic").maybe_compact(
                    dead, DUE
                )
            finally:
                await client.aclose()

        with pytest.raises(StoreUnavailableError, match="unavailable"):
            asyncio.run(ask())
    assert not real_redis.hexists(history.keys.meta, "queued")
    live = compaction_queue(connection=real_redis, name="q")
    assert history.maybe_compact(live, DUE)
    assert live.count == 1


@pytest.mark.real_redis
def test_script_flush_storms_are_ridden_out(real_redis: redis.Redis, redis_url: str) -> None:
    """A SCRIPT FLUSH before every call, or flushing in a loop under traffic, never surfaces:
    a script the server forgot is sent by source (EVAL), which cannot be refused for it."""
    history = RedisHistory(real_redis, "c")
    for message in turns(3):
        real_redis.script_flush()
        history.append(message)
    stop = threading.Event()
    flusher = redis.Redis.from_url(redis_url)

    def flush() -> None:
        while not stop.is_set():
            flusher.script_flush()

    thread = threading.Thread(target=flush)
    thread.start()
    try:
        for i in range(200):
            history.append_many([Message.user(f"q{i}"), Message.assistant(f"a{i}")])
            history.advance_turn()
    finally:
        stop.set()
        thread.join()
        flusher.close()
    assert history.len() == 13 + 400
