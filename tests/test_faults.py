"""The fault proxy works on real servers, and redis-py re-applies a command whose reply was lost."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from faults import ClusterProxies, FaultProxy, match_ends_in
from redis.backoff import NoBackoff
from redis.retry import Retry

pytestmark = pytest.mark.real_redis

NO_RETRY = Retry(NoBackoff(), 0)


def test_default_retry_applies_a_write_twice_when_its_reply_is_lost(
    fault_proxy: FaultProxy,
) -> None:
    """redis.Redis() re-sends an RPUSH the server already applied, so the list gets two items."""
    fault_proxy.drop_reply(b"RPUSH")
    with redis.Redis(host=fault_proxy.host, port=fault_proxy.port) as client:
        assert client.rpush("k", "v") == 2
        assert client.lrange("k", 0, -1) == [b"v", b"v"]
    assert fault_proxy.dropped == 1


def test_without_retries_a_lost_reply_raises_and_the_write_stays_applied_once(
    fault_proxy: FaultProxy,
) -> None:
    """With retries off the call raises ConnectionError, yet the server applied it once."""
    fault_proxy.drop_reply(b"RPUSH")
    with redis.Redis(host=fault_proxy.host, port=fault_proxy.port, retry=NO_RETRY) as client:
        with pytest.raises(redis.ConnectionError):
            client.rpush("k", "v")
        assert client.lrange("k", 0, -1) == [b"v"]
    assert fault_proxy.dropped == 1


def test_from_url_does_not_retry_by_default(fault_proxy: FaultProxy) -> None:
    """Redis.from_url() builds its pool without the constructor's default Retry: no re-send."""
    fault_proxy.drop_reply(b"RPUSH")
    with redis.Redis.from_url(fault_proxy.url) as client:
        with pytest.raises(redis.ConnectionError):
            client.rpush("k", "v")
        assert client.llen("k") == 1


def test_asyncio_client_applies_a_write_twice_when_its_reply_is_lost(
    fault_proxy: FaultProxy,
) -> None:
    """redis.asyncio.Redis() retries the same way: the RPUSH lands twice."""

    async def scenario() -> list[bytes | str]:
        async with redis.asyncio.Redis(host=fault_proxy.host, port=fault_proxy.port) as client:
            await client.rpush("k", "v")
            return await client.lrange("k", 0, -1)

    fault_proxy.drop_reply(b"RPUSH")
    assert asyncio.run(scenario()) == [b"v", b"v"]
    assert fault_proxy.dropped == 1


def test_asyncio_from_url_does_not_retry_by_default(fault_proxy: FaultProxy) -> None:
    """redis.asyncio.Redis.from_url() does not retry either: the call raises, applied once."""

    async def scenario() -> int:
        async with redis.asyncio.Redis.from_url(fault_proxy.url) as client:
            with pytest.raises(redis.ConnectionError):
                await client.rpush("k", "v")
            return await client.llen("k")

    fault_proxy.drop_reply(b"RPUSH")
    assert asyncio.run(scenario()) == 1


@pytest.mark.parametrize("protocol", [2, 3])
def test_handshake_passes_an_armed_proxy_and_only_the_matching_reply_is_lost(
    fault_proxy: FaultProxy, protocol: int
) -> None:
    """A client with a name (HELLO or CLIENT SETNAME, CLIENT SETINFO) reconnects through an armed
    proxy, and only the matching command loses its reply."""
    fault_proxy.drop_reply(b"INCR", count=2)
    with redis.Redis(
        host=fault_proxy.host,
        port=fault_proxy.port,
        protocol=protocol,
        client_name="pod-a",
        decode_responses=True,
    ) as client:
        assert client.set("other", "x")
        assert client.incr("n") == 3  # applied three times: two replies lost, the third arrives
        assert client.client_getname() == "pod-a"
        assert client.get("other") == "x"
    assert fault_proxy.dropped == 2


def test_a_match_split_across_reads_is_found_once() -> None:
    """A pattern that starts in one read and ends in the next matches, and is not counted again."""
    assert match_ends_in(b"*3\r\n$5\r\nRPU", b"SH\r\n$1\r\nk", b"RPUSH")
    assert match_ends_in(b"", b"*3\r\n$5\r\nRPUSH\r\n", b"RPUSH")
    assert not match_ends_in(b"$5\r\nRPUSH", b"\r\n$1\r\nk", b"RPUSH")
    assert not match_ends_in(b"*3\r\n$5\r\nRPU", b"T\r\n", b"RPUSH")


def test_a_command_spread_over_many_reads_loses_its_reply(fault_proxy: FaultProxy) -> None:
    """A command far larger than one read, matched at its end, is applied and its reply lost."""
    big = "x" * 1_000_000
    fault_proxy.drop_reply(b"MARKER")
    with redis.Redis(host=fault_proxy.host, port=fault_proxy.port, retry=NO_RETRY) as client:
        with pytest.raises(redis.ConnectionError):
            client.rpush("k", big, "MARKER")
        assert client.lrange("k", 0, -1) == [big.encode(), b"MARKER"]
    assert fault_proxy.dropped == 1


def test_a_large_reply_is_dropped_whole(fault_proxy: FaultProxy) -> None:
    """A reply spread over many reads is lost entirely; nothing of it reaches the client."""
    big = b"y" * 1_000_000
    fault_proxy.drop_reply(b"GET")
    with redis.Redis(host=fault_proxy.host, port=fault_proxy.port, retry=NO_RETRY) as client:
        client.set("big", big)
        with pytest.raises(redis.ConnectionError):
            client.get("big")
        assert client.get("big") == big
    assert fault_proxy.dropped == 1


def test_kill_all_mid_sequence_the_client_reconnects_and_goes_on(fault_proxy: FaultProxy) -> None:
    """Killing every connection between commands costs nothing to a retrying client."""
    with redis.Redis(host=fault_proxy.host, port=fault_proxy.port) as client:
        for i in range(6):
            client.rpush("k", i)
            if i % 2:
                fault_proxy.kill_all()
        assert client.lrange("k", 0, -1) == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert fault_proxy.dropped == 0


def test_refuse_is_an_outage_and_lifting_it_restores_service(fault_proxy: FaultProxy) -> None:
    """While refusing, a client without retries gets ConnectionError; afterwards it works."""
    with redis.Redis(host=fault_proxy.host, port=fault_proxy.port, retry=NO_RETRY) as client:
        assert client.ping()
        fault_proxy.refuse(True)
        with pytest.raises(redis.ConnectionError):
            client.ping()  # the pooled connection was killed
        with pytest.raises(redis.ConnectionError):
            client.ping()  # and a new one is closed at once
        fault_proxy.refuse(False)
        assert client.ping()


def test_cluster_client_applies_a_write_twice_when_its_reply_is_lost(
    cluster_proxies: ClusterProxies,
) -> None:
    """RedisCluster re-sends an INCR whose reply was lost on the key's node: it ends at 2."""
    with cluster_proxies.client() as client:
        assert client.set("{c}:other", "x")
        proxy = cluster_proxies.drop_reply("{c}:n", b"INCR")
        assert client.incr("{c}:n") == 2
        assert client.get("{c}:n") == b"2"
        assert client.get("{c}:other") == b"x"
        assert {node.port for node in client.get_nodes()} <= {
            p.port for p in cluster_proxies.proxies.values()
        }
    assert proxy.dropped == 1
    assert cluster_proxies.dropped == 1


def test_asyncio_cluster_client_applies_a_write_twice_when_its_reply_is_lost(
    cluster_proxies: ClusterProxies,
) -> None:
    """redis.asyncio's RedisCluster retries through the remap the same way."""

    async def scenario() -> bytes | str | None:
        client = await cluster_proxies.async_client()
        try:
            await client.incr("{c}:n")
            return await client.get("{c}:n")
        finally:
            await client.aclose()

    cluster_proxies.drop_reply("{c}:n", b"INCR")
    assert asyncio.run(scenario()) == b"2"
    assert cluster_proxies.dropped == 1


def test_cluster_client_reads_its_own_writes_through_the_proxies(
    cluster_proxies: ClusterProxies,
) -> None:
    """Keys on every node are written and read back through their proxies."""
    keys = [f"{{k{i}}}" for i in range(30)]
    with cluster_proxies.client() as client:
        for key in keys:
            client.set(key, key)
        assert [client.get(key) for key in keys] == [key.encode() for key in keys]
        served = {client.get_node_from_key(key).port for key in keys}
    assert len(served) == cluster_proxies.cluster.masters
    assert served <= {proxy.port for proxy in cluster_proxies.proxies.values()}
