"""The lane: the store's commands on connections it keeps, without the pool's per-command poll.

Every test checks what the lane must never do (read another command's reply, share
a socket with a forked child, starve a fixed-size pool), on a real redis-server.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import threading
import weakref
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from faults import FaultProxy
from redis.backoff import NoBackoff
from redis.retry import Retry
from samples import STAGED_TEXT

from redis_history import AsyncRedisHistory, Message, RedisHistory
from redis_history.wire.lane import aexecute, execute, lane_of

pytestmark = pytest.mark.real_redis


def _lane(client: Any) -> Any:
    lane = lane_of(client.connection_pool)
    assert lane is not None
    return lane


def _lane_size(client: Any) -> int:
    lane = lane_of(client.connection_pool)
    return -1 if lane is None else len(lane.idle)


def _turn(history: RedisHistory, n: int) -> None:
    for i in range(n):
        history.append(Message.user(f"question {i}"))
        history.append(Message.assistant(f"answer {i}"))


def _in_threads(
    client: redis.Redis, prefix: str, *, threads: int, turns: int
) -> list[BaseException]:
    """``turns`` turns on each of ``threads`` conversations, one thread each, all released at
    once; what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def converse(n: int) -> None:
        try:
            barrier.wait()
            _turn(RedisHistory(client, f"{prefix}{n}"), turns)
        except BaseException as exc:  # pragma: no cover - reported by the caller
            errors.append(exc)

    started = [threading.Thread(target=converse, args=(n,)) for n in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return errors


def test_one_connection_serves_every_command_of_one_thread(real_redis: redis.Redis) -> None:
    history = RedisHistory(real_redis, "c")
    _turn(history, 20)
    assert _lane_size(real_redis) == 1
    conn = _lane(real_redis).idle[0]
    _turn(history, 5)
    assert history.len() == 50
    assert _lane(real_redis).idle == [conn]
    # The pool's own connections are untouched: the lane's one is on loan.
    assert conn in real_redis.connection_pool._in_use_connections


def test_a_reply_left_unread_by_an_interruption_is_never_read_as_the_next_ones(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("warm the lane"))
    conn = _lane(real_redis).idle[0]
    read = conn.read_response

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(conn, "read_response", read)
        raise KeyboardInterrupt  # the command was sent; its reply is still in the socket

    monkeypatch.setattr(conn, "read_response", interrupted)
    with pytest.raises(KeyboardInterrupt):
        execute(real_redis, ("ECHO", b"stale"))
    assert execute(real_redis, ("ECHO", b"fresh")) == b"fresh"
    assert history.len() == 1


def test_an_error_reply_keeps_the_connection(real_redis: redis.Redis) -> None:
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("hi"))
    conn = _lane(real_redis).idle[0]
    real_redis.script_flush()  # the next append's EVALSHA is refused, and sent again by EVAL
    history.append(Message.assistant("hello"))
    with pytest.raises(redis.ResponseError):
        execute(real_redis, ("NO-SUCH-COMMAND",))
    assert _lane(real_redis).idle == [conn]
    assert conn._sock is not None
    assert history.len() == 2


def test_a_connection_the_server_closed_is_reconnected_by_its_retry(
    real_redis: redis.Redis,
) -> None:
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("hi"))
    conn = _lane(real_redis).idle[0]
    killed = real_redis.client_kill_filter(_id=execute(real_redis, ("CLIENT", "ID")))
    assert killed == 1
    history.append(Message.assistant("hello"))  # the connection's Retry reconnects
    assert history.len() == 2
    assert _lane(real_redis).idle == [conn]


def test_a_write_whose_reply_is_lost_is_retried_on_the_lane_and_applied_once(
    fault_proxy: FaultProxy,
) -> None:
    client = redis.Redis.from_url(fault_proxy.url, retry=Retry(NoBackoff(), 3))
    history = RedisHistory(client, "c")
    history.append(Message.user("hi"))
    fault_proxy.drop_reply(b"answer")
    history.append(Message.assistant("answer"))
    assert fault_proxy.dropped == 1
    assert [m.content for m in history.snapshot()] == ["hi", "answer"]
    client.close()


def test_threads_share_the_lane_without_sharing_a_connection(real_redis: redis.Redis) -> None:
    # Their first commands race to make the pool's lane.
    assert _in_threads(real_redis, "t", threads=8, turns=40) == []
    for n in range(8):
        assert RedisHistory(real_redis, f"t{n}").len() == 80
    assert 1 <= _lane_size(real_redis) <= 8
    lane = _lane(real_redis).idle
    assert len({id(conn) for conn in lane}) == len(lane)
    # Every connection borrowed is in the one lane or back in the pool: none was lost to a
    # second lane made by a thread racing the first.
    assert set(real_redis.connection_pool._in_use_connections) == set(lane)


def test_a_forked_child_never_uses_its_parents_connections(real_redis: redis.Redis) -> None:
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("before the fork"))
    parent_conn = _lane(real_redis).idle[0]
    done: Any = multiprocessing.get_context("fork").SimpleQueue()

    def child() -> None:
        # The same client object, inherited: its lane belongs to the parent.
        RedisHistory(real_redis, "c").append(Message.assistant("from the child"))
        lane = _lane(real_redis).idle
        done.put(parent_conn not in lane and len(lane) == 1)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    assert process.exitcode == 0
    assert done.get() is True
    history.append(Message.user("after the fork"))
    assert [m.content for m in history.snapshot()] == [
        "before the fork",
        "from the child",
        "after the fork",
    ]
    assert _lane(real_redis).idle == [parent_conn]


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(
            lambda url: redis.Redis.from_url(url, single_connection_client=True), id="single"
        ),
        pytest.param(
            lambda url: redis.Redis(
                connection_pool=redis.BlockingConnectionPool.from_url(url, max_connections=2)
            ),
            id="blocking-pool",
        ),
    ],
)
def test_clients_whose_pool_a_lane_could_disturb_use_execute_command(
    redis_url: str, real_redis: redis.Redis, build: Any
) -> None:
    client = build(redis_url)
    history = RedisHistory(client, "c")
    _turn(history, 3)
    assert history.len() == 6
    assert lane_of(client.connection_pool) is None
    client.close()


def test_a_client_that_overrides_execute_command_is_honoured(real_redis: redis.Redis) -> None:
    seen: list[Any] = []

    class Recording(redis.Redis):
        def execute_command(self, *args: Any, **options: Any) -> Any:
            seen.append(args[0])
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    client = Recording(connection_pool=real_redis.connection_pool)
    RedisHistory(client, "c").append(Message.user("hi"))
    assert seen == ["EVALSHA"]


@pytest.mark.parametrize("real", [False, True], ids=["fakeredis", "redis"])
def test_the_lane_is_used_on_fakeredis_and_redis_alike(real: bool, real_redis: redis.Redis) -> None:
    client = real_redis if real else fakeredis.FakeRedis()
    history = RedisHistory(client, "c")
    _turn(history, 3)
    assert [m.content for m in history.snapshot()][-2:] == ["question 2", "answer 2"]
    assert _lane_size(client) == 1


def test_a_lane_connection_the_server_closed_while_idle_is_reconnected_without_a_retry(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """What the pool's check gives a client that never retries (``from_url``'s default)."""
    client = redis.Redis.from_url(redis_url, retry=Retry(NoBackoff(), 0))
    history = RedisHistory(client, "c")
    history.append(Message.user("hi"))
    assert real_redis.client_kill_filter(_id=execute(client, ("CLIENT", "ID"))) == 1
    history.append(Message.assistant("hello"))
    assert history.len() == 2
    client.close()


def test_an_asyncio_history_keeps_one_connection_and_survives_a_cancellation(
    redis_url: str,
) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        history = AsyncRedisHistory(client, "async")
        for i in range(10):
            await history.append(Message.user(f"q{i}"))
            await history.append(Message.assistant(f"a{i}"))
        lane = _lane(client).idle
        assert len(lane) == 1
        conn = lane[0]
        read = conn.read_response
        sent = asyncio.Event()

        async def stalled(*args: Any, **kwargs: Any) -> Any:
            sent.set()
            await asyncio.sleep(3600)  # the command went out; its reply never gets read

        conn.read_response = stalled
        task = asyncio.ensure_future(aexecute(client, ("ECHO", b"stale")))
        await sent.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        conn.read_response = read
        assert await aexecute(client, ("ECHO", b"fresh")) == b"fresh"
        assert await history.len() == 20
        await client.aclose()

    asyncio.run(scenario())


def test_concurrent_coroutines_never_share_a_lane_connection(redis_url: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)

        async def converse(n: int) -> None:
            history = AsyncRedisHistory(client, f"co{n}")
            for i in range(30):
                await history.append(Message.user(f"q{i}"))
                await history.append(Message.assistant(f"a{i}"))

        await asyncio.gather(*(converse(n) for n in range(8)))
        for n in range(8):
            messages = await AsyncRedisHistory(client, f"co{n}").snapshot()
            assert [m.content for m in messages][-2:] == ["q29", "a29"]
        lane = _lane(client).idle
        assert 1 <= len(lane) <= 8
        assert len({id(conn) for conn in lane}) == len(lane)
        await client.aclose()

    asyncio.run(scenario())


ARGS = ("EVALSHA", "0" * 40, 2, "rh:café:{对话}:msgs", "k2", b"\x00\xffbytes", 0, 12345, "call_é")


def test_hiredis_packs_the_bytes_redis_py_would_send(redis_url: str) -> None:
    """Packed by hiredis directly, a command is byte for byte what the connection's own
    packer makes, sync and asyncio."""
    sync = redis.Redis.from_url(redis_url)
    execute(sync, ("PING",))
    lane = _lane(sync)
    conn = lane.idle[0]
    assert lane.hiredis
    assert b"".join(lane.pack(ARGS)(conn)) == b"".join(conn.pack_command(*ARGS))
    sync.close()

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await aexecute(client, ("PING",))
        alane = _lane(client)
        aconn = alane.idle[0]
        assert alane.hiredis
        assert b"".join(alane.pack(ARGS)(aconn)) == b"".join(aconn.pack_command(*ARGS))
        await client.aclose()

    asyncio.run(scenario())


def test_an_asyncio_client_encoding_text_otherwise_packs_with_its_own_encoder(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """Its commands, a staged transaction's too, are packed by the connection itself."""

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, encoding="latin-1")
        history = AsyncRedisHistory(client, "café")
        await history.append(Message.user("hi"))
        await history.append(Message.assistant(STAGED_TEXT))  # staged
        assert not _lane(client).hiredis
        await client.aclose()

    real_redis.config_resetstat()
    asyncio.run(scenario())
    latin1_key = "rh:default:{café}:msgs".encode("latin-1")
    assert real_redis.llen(latin1_key) == 2
    assert real_redis.info("commandstats")["cmdstat_exec"]["calls"] == 1


def test_a_lane_keeps_at_most_a_quarter_of_its_pools_connections(redis_url: str) -> None:
    """Beyond a quarter of ``max_connections``, connections go back to the pool; a pool
    too small for that gets no lane."""
    client = redis.Redis.from_url(redis_url, max_connections=8)
    assert _in_threads(client, "q", threads=6, turns=10) == []
    assert 1 <= _lane_size(client) <= 2
    in_use = client.connection_pool._in_use_connections
    assert set(in_use) == set(_lane(client).idle)
    client.close()

    tiny = redis.Redis.from_url(redis_url, max_connections=3)
    RedisHistory(tiny, "tiny").append(Message.user("hi"))
    assert _lane_size(tiny) <= 0
    assert not tiny.connection_pool._in_use_connections
    tiny.close()


def test_a_dropped_client_takes_its_lane_and_connections_with_it(redis_url: str) -> None:
    """A history per request on a client of its own (``RedisHistory.from_url``), closed and
    dropped, leaves no pool, lane or connection behind: the lane does not keep them."""
    pools = []
    for n in range(3):
        history = RedisHistory.from_url(redis_url, f"r{n}")
        history.append(Message.user("hi"))
        assert _lane_size(history.client) == 1
        pools.append(weakref.ref(history.client.connection_pool))
        history.client.close()
        del history
    gc.collect()
    assert [ref() for ref in pools] == [None, None, None]

    async def scenario() -> weakref.ref[Any]:
        history = AsyncRedisHistory.from_url(redis_url, "async")
        await history.append(Message.user("hi"))
        await history.client.aclose()
        return weakref.ref(history.client.connection_pool)

    ref = asyncio.run(scenario())
    gc.collect()
    assert ref() is None
