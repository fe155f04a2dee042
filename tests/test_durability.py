"""``wait_replicas``: a write is acknowledged only once that many replicas have it, so a failover
cannot lose an acknowledged write; when they do not confirm in time, ``ReplicationError``."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from backends import SyncOverAsync
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from samples import turns

from redis_history import (
    AsyncRedisHistory,
    Message,
    RedisHistory,
    ReplicationError,
    StoreUnavailableError,
)
from redis_history.demo.server import LocalCluster, RedisServer

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]

DEADLINE = 60.0


def wait_for(condition: Callable[[], object], what: str) -> Any:
    """Poll ``condition`` until it holds; fail naming ``what`` after a generous deadline."""
    end = time.monotonic() + DEADLINE
    while True:
        try:
            value = condition()
        except (redis.RedisError, redis.exceptions.RedisClusterException, StoreUnavailableError):
            value = None
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(params=["sync", "async"])
def no_replica(
    request: pytest.FixtureRequest, redis_url: str, real_redis: redis.Redis
) -> Iterator[Callable[..., Any]]:
    """Histories on the session server, which has no replica."""
    runner = asyncio.Runner()
    if request.param == "sync":
        yield lambda c, **o: RedisHistory(real_redis, c, **o)
    else:
        client = redis.asyncio.Redis.from_url(redis_url)
        yield lambda c, **o: SyncOverAsync(AsyncRedisHistory(client, c, **o), runner)
        runner.run(client.aclose())
    runner.close()


def test_without_the_replicas_every_write_is_applied_and_reported(
    no_replica: Callable[..., Any], real_redis: redis.Redis
) -> None:
    """With no replica to confirm, each write is applied and raises ReplicationError saying
    how many confirmed; repeating it applies nothing more; reads never wait."""
    history = no_replica("c", wait_replicas=1, wait_timeout=0.05)
    question = Message.user("q")
    with pytest.raises(ReplicationError) as info:
        history.append(question)
    assert (info.value.acknowledged, info.value.required) == (0, 1)
    with pytest.raises(ReplicationError):
        history.append(question)
    assert real_redis.llen(history.keys.msgs) == 1
    with pytest.raises(ReplicationError):
        history.truncate(0, op_id="t")
    assert history.snapshot() == []
    assert history.token_estimate() is None


def test_a_replica_confirms_writes_and_a_stalled_one_is_reported(tmp_path: Any) -> None:
    """With a live replica each write returns once it has it; with the replica stopped, the
    write raises ReplicationError instead of being acknowledged."""
    with (
        RedisServer(extra_args=["--repl-diskless-sync-delay", "0"]) as primary,
        RedisServer(extra_args=["--replicaof", primary.host, str(primary.port)]) as replica,
    ):
        wait_for(
            lambda: replica.client().info("replication")["master_link_status"] == "up",
            "the replica to sync",
        )
        # A generous timeout where the replica is live (WAIT returns as soon as it confirms,
        # so a loaded machine cannot fail the write), a short one where it is stopped.
        history = RedisHistory(primary.client(), "c", wait_replicas=1, wait_timeout=10)
        history.append_many(turns(2))
        assert replica.client().llen(history.keys.msgs) == 9
        assert replica.pid is not None
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            stalled = RedisHistory(primary.client(), "c", wait_replicas=1, wait_timeout=0.3)
            with pytest.raises(ReplicationError):
                stalled.append(Message.user("not confirmed"))
        finally:
            os.kill(replica.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[LocalCluster]:
    """Three primaries, each with one replica, for this module only (a test kills a node)."""
    with LocalCluster(masters=3, replicas=1) as cluster:
        yield cluster


def server_of(cluster: LocalCluster, node: Any) -> RedisServer:
    (server,) = [s for s in cluster.nodes if s.port == node.port]
    return server


def ids_of(client: Any, conversation_id: str) -> list[str]:
    return [m.id for m in RedisHistory(client, conversation_id).snapshot()]


def replica_length(server: RedisServer, key: str) -> int:
    """LLEN read on a cluster replica (READONLY on the same connection)."""
    with server.client().pipeline(transaction=False) as pipe:
        pipe.execute_command("READONLY")  # type: ignore[no-untyped-call]
        pipe.llen(key)
        return int(pipe.execute()[1])


def test_async_cluster_writes_wait_for_the_slots_replica(replicated_cluster: LocalCluster) -> None:
    """On the asyncio cluster client, WAIT goes to the primary that took the write."""

    async def scenario() -> None:
        client = AsyncRedisCluster(host="127.0.0.1", port=replicated_cluster.nodes[0].port)
        try:
            history = AsyncRedisHistory(client, "async-c", wait_replicas=1, wait_timeout=10)
            await history.append_many(turns(2))
            await client.initialize()
            replica = client.get_node_from_key(history.keys.msgs, replica=True)
            assert replica is not None
            server = server_of(replicated_cluster, replica)
            assert replica_length(server, history.keys.msgs) == 9
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)
            try:
                stalled = AsyncRedisHistory(client, "async-c", wait_replicas=1, wait_timeout=0.3)
                with pytest.raises(ReplicationError):
                    await stalled.append(Message.user("not confirmed"))
            finally:
                os.kill(server.pid, signal.SIGCONT)
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_no_acknowledged_write_is_lost_when_the_primary_dies(
    replicated_cluster: LocalCluster,
) -> None:
    """A failover to a replica that missed writes loses acknowledged appends of a plain
    history, and none of a history with wait_replicas=1 (whose unconfirmed appends raised)."""
    client: Any = replicated_cluster.client()  # redis-py's cluster methods are untyped
    waiting = RedisHistory(client, "durable", wait_replicas=1, wait_timeout=0.3)
    primary = client.get_node_from_key(waiting.keys.msgs)
    plain_id = next(
        f"plain-{i}"
        for i in range(10_000)
        if client.get_node_from_key(f"{{plain-{i}}}").name == primary.name
    )
    plain = RedisHistory(client, plain_id)
    acknowledged: dict[str, list[str]] = {"durable": [], "plain": []}

    def append(history: RedisHistory, name: str, n: int) -> None:
        for i in range(n):
            message = Message.user(f"{name} {i}") if i % 2 == 0 else Message.assistant(f"{i}")
            try:
                history.append(message)
            except ReplicationError:
                continue
            acknowledged[name].append(message.id)

    append(waiting, "durable", 10)
    append(plain, "plain", 10)
    replica = server_of(replicated_cluster, client.get_node_from_key(waiting.keys.msgs, True))
    assert replica.pid is not None
    # Cut replication: the replica is paused and the primary drops its link, so what follows
    # reaches the primary alone (a mere pause would leave it in the replica's socket buffer).
    os.kill(replica.pid, signal.SIGSTOP)
    # "slave": the name of the type that redis-py before 8 accepts (Redis takes both)
    server_of(replicated_cluster, primary).client().client_kill_filter(_type="slave")
    append(waiting, "durable", 6)
    append(plain, "plain", 6)
    assert len(acknowledged["durable"]) == 10, "writes the replica missed were acknowledged"
    assert len(acknowledged["plain"]) == 16
    server_of(replicated_cluster, primary).kill()
    os.kill(replica.pid, signal.SIGCONT)
    client.close()

    fresh: Any = RedisCluster(host=replica.host, port=replica.port)  # nodes[0] may be the dead one
    wait_for(
        lambda: (
            fresh.get_node_from_key(waiting.keys.msgs).port == replica.port
            or fresh.nodes_manager.initialize()
        ),
        "the replica to take over",
    )
    stored = {name: wait_for(partial(ids_of, fresh, name), name) for name in ("durable", plain_id)}
    assert stored["durable"] == acknowledged["durable"]
    lost = [i for i in acknowledged["plain"] if i not in stored[plain_id]]
    assert len(lost) == 6, "without wait_replicas, the appends the replica missed are lost"
    fresh.close()


def test_wait_replicas_must_not_be_negative() -> None:
    """A negative replica count is a ValueError."""
    with pytest.raises(ValueError, match="wait_replicas"):
        RedisHistory(fakeredis.FakeRedis(), "c", wait_replicas=-1)
