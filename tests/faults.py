"""Fault injection for real-Redis tests: a TCP proxy that loses replies, kills and refuses clients.

``FaultProxy`` forwards bytes between redis-py and a ``redis-server`` and, when armed, lets a
command reach the server but throws its reply away and closes the connection: the command was
applied, the client sees a connection error and (by default) retries. It is armed for the
commands that contain some bytes (or match a pattern), or for a share of all commands drawn
from a seeded generator; it counts the replies it lost and the connections it severed.
``ClusterProxies`` puts one proxy in front of every node of a
:class:`~redis_history.demo.server.LocalCluster`. The fixtures ``fault_proxy`` and
``cluster_proxies`` give each test a fresh set in front of flushed servers.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
from collections import Counter
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import suppress
from types import TracebackType
from typing import Any, Self

import pytest
import redis
import redis.asyncio.cluster
from redis.cluster import RedisCluster

from redis_history.demo.server import LocalCluster, RedisServer

__all__ = ["ClusterProxies", "FaultProxy", "cluster_proxies", "fault_proxy"]

MAX_MATCH = 256
"""Longest ``match``: each connection keeps this many trailing bytes to match across reads."""
START_TIMEOUT = 10.0
READ_SIZE = 65536

Address = tuple[str, int]
Match = bytes | re.Pattern[bytes]
"""What arms a drop: bytes a client write contains, or a pattern a match of which ends in it."""
_AT_RANDOM = object()
"""Marks a reply lost by :meth:`FaultProxy.drop_at_random` rather than by a match."""


class _Link:
    """One proxied connection: the client's and the server's stream writers."""

    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.client = client
        self.server = server
        self.tail = b""
        self.drop_reply: object | None = None
        """What armed the loss of this connection's next reply: a match, or ``_AT_RANDOM``."""
        self.counted = False
        """Whether that loss has been counted."""
        self.task = asyncio.current_task()

    def close(self) -> None:
        self.client.close()
        self.server.close()


class FaultProxy:
    """A TCP proxy on a free 127.0.0.1 port, run by an asyncio loop in a daemon thread.

    Every method may be called from any thread. Use as a context manager, or call
    :meth:`start` and :meth:`stop`.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        """Configure (not start) a proxy forwarding to ``target_host:target_port``."""
        self.target: Address = (target_host, target_port)
        self.host = "127.0.0.1"
        self.port = 0
        self._lock = threading.Lock()
        self._armed: dict[Match, int] = {}
        self._one_in = 0
        self._draw = random.Random(0)
        self._dropped: Counter[object] = Counter()
        self._severed = 0
        self._refusing = False
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._clients: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def dropped(self) -> int:
        """How many replies have been dropped so far, whatever armed them: thrown away, or
        never come because the connection was closed (:meth:`kill_all`) after the write."""
        with self._lock:
            return self._dropped.total()

    @property
    def dropped_at_random(self) -> int:
        """How many replies :meth:`drop_at_random` has dropped so far."""
        with self._lock:
            return self._dropped[_AT_RANDOM]

    def dropped_by(self, match: Match) -> int:
        """How many replies to writes that ``match`` armed have been dropped so far."""
        with self._lock:
            return self._dropped[match]

    @property
    def severed(self) -> int:
        """How many connections :meth:`kill_all` and :meth:`refuse` have closed so far."""
        with self._lock:
            return self._severed

    def drop_reply(self, match: Match, count: int = 1) -> None:
        """Lose the replies to the next ``count`` client writes that contain ``match``.

        Each such write (``b"EVALSHA"``, ``b"RPUSH"``) still reaches the server; when the first
        byte of the server's answer arrives, it is discarded and the connection closed both
        ways. Replaces any earlier arming; ``count=0`` disarms. Meant for request/response
        clients: a pipeline's earlier replies still pending on that connection are lost too.
        ``match`` may be a pattern instead, for a command told apart by its arguments: a
        match of it must end in the write (or its last ``MAX_MATCH`` bytes before it).
        """
        self.drop_replies({match: count})

    def drop_replies(self, armed: Mapping[Match, int]) -> None:
        """:meth:`drop_reply` for several matches at once, each with its own count; a write
        that two match counts for the first. Replaces any earlier arming."""
        for match in armed:
            if isinstance(match, bytes) and not 0 < len(match) <= MAX_MATCH:
                raise ValueError(f"match must be 1 to {MAX_MATCH} bytes")
        with self._lock:
            self._armed = {match: count for match, count in armed.items() if count > 0}

    def drop_at_random(self, one_in: int, seed: int = 0) -> None:
        """From now on, lose the reply to each client write (over all connections, whatever
        it sends) with a chance of one in ``one_in``; ``0`` stops. Drawn from a generator
        seeded with ``seed``, one draw per write: a share of the commands that does not depend
        on how fast they go, yet never in step with a client that repeats the same sequence
        (every n-th write would hit the same command of each job a worker runs)."""
        if one_in < 0:
            raise ValueError(f"one_in must be at least 0, got {one_in!r}")
        with self._lock:
            self._one_in, self._draw = one_in, random.Random(seed)

    def kill_all(self) -> None:
        """Close every proxied connection now, like ``CLIENT KILL TYPE normal``."""
        self._call(self._kill_all())

    def refuse(self, on: bool) -> None:
        """While on, close new connections at once and kill the open ones (an outage)."""
        self._call(self._refuse(on))

    def start(self) -> Self:
        """Start listening; returns once the port is bound."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(),), name=f"FaultProxy->{self.target}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise RuntimeError("the fault proxy did not start")
        if self._error is not None:
            raise RuntimeError("the fault proxy did not start") from self._error
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and join the thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join()
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._loop is None or self._thread is None:
            coro.close()
            raise RuntimeError("the fault proxy is not running")
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(START_TIMEOUT)

    async def _main(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            server = await asyncio.start_server(self._accept, self.host, 0)
            self.port = int(server.sockets[0].getsockname()[1])
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._ready.set()
        await self._stopping.wait()
        self._refusing = True
        server.close()
        await asyncio.sleep(0)  # a connection accepted just before gets its callback: closed
        await self._kill_all()
        # handlers still dialling the server see _refusing and end on their own
        await asyncio.gather(*self._handlers, return_exceptions=True)
        for client in self._clients:  # every accepted connection, whatever became of it
            client.close()
        await server.wait_closed()

    def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        # a plain callback, so every handler task is tracked from the moment it exists
        self._clients.add(client_w)
        if self._refusing:
            client_w.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve(client_r, client_w))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _kill_all(self) -> None:
        links = list(self._links)
        with self._lock:
            self._severed += len(links)
        for link in links:
            link.close()
        tasks = {link.task for link in links if link.task is not None}
        if tasks:
            await asyncio.wait(tasks)

    async def _refuse(self, on: bool) -> None:
        self._refusing = on
        if on:
            await self._kill_all()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            await _closed(client_w)
            return
        link = _Link(client_w, server_w)
        try:
            # refuse() or stop() may have run while the server was dialled
            if not self._refusing:
                self._links.add(link)
                await asyncio.gather(
                    self._upstream(client_r, link), self._downstream(server_r, link)
                )
        finally:
            self._links.discard(link)
            link.close()
            self._count_lost(link)
            await _closed(server_w)
            await _closed(client_w)

    def _arming(self, link: _Link, chunk: bytes) -> object | None:
        """What arms the loss of the reply to ``chunk``, if anything does."""
        tail, link.tail = link.tail, (link.tail + chunk)[-MAX_MATCH:]
        with self._lock:
            unlucky = bool(self._one_in) and self._draw.randrange(self._one_in) == 0
            if link.drop_reply is not None:  # its connection is about to close anyway
                return None
            for match, remaining in self._armed.items():
                if remaining and match_ends_in(tail, chunk, match):
                    self._armed[match] -= 1
                    return match
            return _AT_RANDOM if unlucky else None

    def _count_lost(self, link: _Link) -> None:
        """Count the reply ``link`` was armed to lose, once (thrown away, or cut off)."""
        with self._lock:
            if link.drop_reply is not None and not link.counted:
                link.counted = True
                self._dropped[link.drop_reply] += 1

    async def _upstream(self, reader: asyncio.StreamReader, link: _Link) -> None:
        try:
            while chunk := await reader.read(READ_SIZE):
                # set before forwarding, so the reply cannot come back first
                arming = self._arming(link, chunk)
                if arming is not None:
                    link.drop_reply = arming
                link.server.write(chunk)
                await link.server.drain()
        except OSError:
            pass
        finally:
            link.close()

    async def _downstream(self, reader: asyncio.StreamReader, link: _Link) -> None:
        try:
            while chunk := await reader.read(READ_SIZE):
                if link.drop_reply is not None:
                    self._count_lost(link)
                    break
                link.client.write(chunk)
                await link.client.drain()
        except OSError:
            pass
        finally:
            link.close()


def match_ends_in(tail: bytes, chunk: bytes, match: Match) -> bool:
    """Whether ``match`` ends inside ``chunk``, possibly starting in the ``tail`` read before it."""
    if isinstance(match, bytes):
        return (tail + chunk).find(match, max(0, len(tail) - len(match) + 1)) >= 0
    return any(found.end() > len(tail) for found in match.finditer(tail + chunk))


async def _closed(writer: asyncio.StreamWriter) -> None:
    with suppress(OSError):
        await writer.wait_closed()


class ClusterProxies:
    """One :class:`FaultProxy` in front of every node of a :class:`LocalCluster`.

    Cluster clients built with :meth:`address_remap` (or by :meth:`client` and
    :meth:`async_client`) reach every node through its proxy. MOVED and ASK redirects carry
    real addresses, which redis-py does not remap: keep the slots where they are while testing.
    """

    def __init__(self, cluster: LocalCluster) -> None:
        """Configure (not start) a proxy per node."""
        self.cluster = cluster
        self.proxies: dict[Address, FaultProxy] = {
            (node.host, node.port): FaultProxy(node.host, node.port) for node in cluster.nodes
        }

    def address_remap(self, address: Address) -> Address:
        """The proxy's address for a node's real one (what the cluster announces)."""
        proxy = self.proxies[address]
        return proxy.host, proxy.port

    @property
    def entry(self) -> FaultProxy:
        """The proxy of the first node, the one clients discover the cluster through."""
        node = self.cluster.nodes[0]
        return self.proxies[node.host, node.port]

    def client(self, **options: Any) -> RedisCluster:
        """A sync cluster client whose every connection goes through a proxy."""
        return RedisCluster(
            host=self.entry.host, port=self.entry.port, address_remap=self.address_remap, **options
        )

    async def async_client(self, **options: Any) -> redis.asyncio.cluster.RedisCluster:
        """An initialized asyncio cluster client whose every connection goes through a proxy.

        Initialized here because redis-py 8.1 sends the first keyed command of a fresh asyncio
        cluster client to the default node; the MOVED reply names the real node, and redirects
        are not remapped, so that slot would bypass its proxy from then on.
        """
        client = redis.asyncio.cluster.RedisCluster(
            host=self.entry.host, port=self.entry.port, address_remap=self.address_remap, **options
        )
        await client.initialize()
        return client

    def proxy_for(self, key: str | bytes) -> FaultProxy:
        """The proxy of the primary that serves ``key``'s slot, as the cluster says now."""
        with self.cluster.client() as direct:
            node = direct.get_node_from_key(key)
        return self.proxies[node.host, node.port]

    def drop_reply(self, key: str | bytes, match: bytes, count: int = 1) -> FaultProxy:
        """Arm :meth:`FaultProxy.drop_reply` on the proxy of ``key``'s primary, and return it."""
        proxy = self.proxy_for(key)
        proxy.drop_reply(match, count)
        return proxy

    @property
    def dropped(self) -> int:
        """Replies dropped so far, over every node."""
        return sum(proxy.dropped for proxy in self.proxies.values())

    def kill_all(self) -> None:
        """Close every proxied connection to every node."""
        for proxy in self.proxies.values():
            proxy.kill_all()

    def start(self) -> Self:
        """Start every proxy."""
        try:
            for proxy in self.proxies.values():
                proxy.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every proxy."""
        for proxy in self.proxies.values():
            proxy.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@pytest.fixture
def fault_proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    """A fault proxy in front of the session's redis-server, flushed before the test."""
    with redis_server.client() as direct:
        direct.flushall()
    with FaultProxy(redis_server.host, redis_server.port) as proxy:
        yield proxy


@pytest.fixture
def cluster_proxies(redis_cluster: LocalCluster) -> Iterator[ClusterProxies]:
    """Fault proxies in front of every node of the session's cluster, flushed before the test."""
    with redis_cluster.client() as direct:
        direct.flushall(target_nodes=RedisCluster.PRIMARIES)
    with ClusterProxies(redis_cluster) as proxies:
        yield proxies
