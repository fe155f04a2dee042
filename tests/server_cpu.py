"""No server call over 250 ms, measured by the server's own CPU time, which a busy machine
does not stretch.

``SLOWLOG`` and ``INFO commandstats`` time a call by the wall clock: with other processes
running, the server waits for a core inside a call and a 100 ms script logs 700 ms. The
kernel's count of the time the server's main thread spent running
(``/proc/<pid>/task/<pid>/schedstat``, in nanoseconds) leaves those waits out. The fixture
``server_cpu`` is a client on the session's server that reads it before and after every
command and every pipeline it sends (a pipeline's commands run back to back, holding the
server for their sum, so the sum is what is charged), and fails the test if any took over
250 ms. ``test_limits.py`` shows it fails on a call that does take longer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.client import Pipeline

from redis_history.demo.server import RedisServer

__all__ = ["LIMIT_NS", "Meter", "MeteredRedis", "server_cpu"]

LIMIT_NS = 250_000_000
"""What no server call may take, in the server's CPU nanoseconds."""


class Meter:
    """The server's main thread's CPU time, and what each call took of it."""

    def __init__(self, pid: int) -> None:
        self._stat = Path(f"/proc/{pid}/task/{pid}/schedstat")
        self.calls: list[tuple[int, str]] = []

    def now(self) -> int:
        """Nanoseconds the thread has run so far."""
        return int(self._stat.read_text().split()[0])

    def charge(self, since: int, what: str) -> None:
        self.calls.append((self.now() - since, what[:80]))

    def over(self, limit: int = LIMIT_NS) -> list[tuple[int, str]]:
        """The calls over ``limit``, slowest first."""
        return sorted((c for c in self.calls if c[0] > limit), reverse=True)

    def slowest(self) -> tuple[int, str]:
        return max(self.calls)


def _named(args: tuple[Any, ...]) -> str:
    return " ".join(a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in args)


class MeteredPipeline(Pipeline):
    meter: Meter

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        what = "pipeline: " + "; ".join(_named(c[0][:2]) for c in self.command_stack)
        since = self.meter.now()
        try:
            return super().execute(raise_on_error)
        finally:
            self.meter.charge(since, what)


class MeteredRedis(redis.Redis):
    """A client whose every command and pipeline is charged the server CPU it took."""

    meter: Meter

    def execute_command(self, *args: Any, **options: Any) -> Any:
        since = self.meter.now()
        try:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        finally:
            self.meter.charge(since, _named(args[:2]))

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        pipe = MeteredPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.meter = self.meter
        return pipe


def metered(server: RedisServer) -> MeteredRedis:
    """A client on a local server, metering its CPU (skips where ``/proc`` does not show it)."""
    if server.pid is None or not Path(f"/proc/{server.pid}/task/{server.pid}/schedstat").exists():
        pytest.skip("the server's CPU time is read from Linux's /proc")
    client = MeteredRedis(host=server.host, port=server.port)
    client.meter = Meter(server.pid)
    return client


@pytest.fixture
def server_cpu(redis_server: RedisServer, real_redis: redis.Redis) -> Iterator[MeteredRedis]:
    """A metered client on the session's (flushed) server; the test fails on any call that took
    the server over 250 ms of CPU."""
    client = metered(redis_server)
    yield client
    client.close()
    over = client.meter.over()
    assert not over, f"server calls over {LIMIT_NS // 1_000_000} ms of CPU: {over}"
