"""No server call over 250 ms, measured by the server's own CPU time, which a busy machine
does not stretch.

``SLOWLOG`` and ``INFO commandstats`` time a call by the wall clock: with other processes
running, the server waits for a core inside a call and a 100 ms script logs 700 ms. The
kernel's count of the time the server's main thread spent running
(``/proc/<pid>/task/<pid>/schedstat``, in nanoseconds) leaves those waits out. The fixture
``server_cpu`` is a client on the session's server whose connections read it when a request
is sent and when its replies are read (a pipeline's or a transaction's commands run back to
back, holding the server for their sum, so the sum is what is charged), and fails the test
if any took over 250 ms. ``test_limits.py`` shows it fails on a call that does take longer.

The meter sits in the connection, below both redis-py's client and the store's connection
lane, so the store takes every path it takes in production (its staged transactions too).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_history.demo.server import RedisServer

__all__ = ["LIMIT_NS", "Meter", "MeteredClient", "metered", "server_cpu"]

LIMIT_NS = 250_000_000
"""What no server call may take, in the server's CPU nanoseconds."""


class Meter:
    """The server's main thread's CPU time, and what each request took of it."""

    def __init__(self, pid: int) -> None:
        self._stat = Path(f"/proc/{pid}/task/{pid}/schedstat")
        self.calls: list[tuple[int, str]] = []

    def now(self) -> int:
        """Nanoseconds the thread has run so far."""
        return int(self._stat.read_text().split()[0])

    def charge(self, since: int, what: str) -> None:
        self.calls.append((self.now() - since, what[:80]))

    def over(self, limit: int = LIMIT_NS) -> list[tuple[int, str]]:
        """The requests over ``limit``, slowest first."""
        return sorted((c for c in self.calls if c[0] > limit), reverse=True)


def _named(packed: Any) -> str:
    """The first words of a packed command (RESP), for the report."""
    raw = b"".join(packed) if isinstance(packed, list | tuple) else bytes(packed)
    words = [w for w in raw.split(b"\r\n") if w and w[:1] not in (b"*", b"$")]
    return " ".join(w.decode(errors="replace") for w in words[:2])


class MeteredConnection(redis.Connection):
    """A connection that charges each request the server CPU from its first bytes sent to
    each of its replies read, so the last reply's charge is the whole request's (a request
    starts with the first bytes sent after a reply was read)."""

    meter: Meter
    _since = 0
    _what = ""
    _answered = True

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if self._answered:
            self._since, self._what, self._answered = self.meter.now(), _named(command), False
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        finally:
            self.meter.charge(self._since, self._what)
            self._answered = True


class MeteredClient(redis.Redis):
    """A client whose connections charge the meter."""

    meter: Meter


def metered(server: RedisServer) -> MeteredClient:
    """A client on a local server, metering its CPU (skips where ``/proc`` does not show it)."""
    if server.pid is None or not Path(f"/proc/{server.pid}/task/{server.pid}/schedstat").exists():
        pytest.skip("the server's CPU time is read from Linux's /proc")
    meter = Meter(server.pid)
    connection = type("Metered", (MeteredConnection,), {"meter": meter})
    pool = redis.ConnectionPool(host=server.host, port=server.port, connection_class=connection)
    client = MeteredClient(connection_pool=pool)
    client.meter = meter
    return client


@pytest.fixture
def server_cpu(redis_server: RedisServer, real_redis: redis.Redis) -> Iterator[MeteredClient]:
    """A metered client on the session's (flushed) server; the test fails on any request that
    took the server over 250 ms of CPU."""
    client = metered(redis_server)
    yield client
    client.close()
    over = client.meter.over()
    assert not over, f"server requests over {LIMIT_NS // 1_000_000} ms of CPU: {over}"
