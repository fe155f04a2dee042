"""Every History backend the contract suite runs against, behind one factory fixture."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis.asyncio

from redis_history import AsyncRedisHistory, RedisHistory
from redis_history.admin import Target, load_scripts
from redis_history.store import core
from redis_history.testing import InMemoryHistory
from redis_history.wire import lane as _lane

HistoryFactory = Callable[..., Any]

BACKENDS = [
    "memory",
    "fakeredis",
    "fakeredis-async",
    "redis",
    "redis-async",
    "cluster",
    "redis-staged",
    "redis-async-staged",
    "redis-async-functions",
    "cluster-functions",
]
"""``-staged``: every append is sent as a staged transaction (``core.STAGE_BYTES`` 0),
the way the store sends large ones, so the whole suite holds for that path too.
``-functions``: every script runs as the function of the store's library (``FCALL``), as
for a tenant whose rule grants no ``EVALSHA``."""


def functions_only(client: Any, loader: Any) -> None:
    """Send ``client``'s calls as the store's functions, once ``loader`` (a sync client of the
    same server or cluster) loaded them on every primary."""
    load_scripts(Target(loader))
    setattr(client, _lane._FUNCTIONS, True)


class SyncOverAsync:
    """Drives an asyncio object (an :class:`AsyncRedisHistory`, an asyncio memory) from sync
    tests, one event loop per test: its coroutines are run, everything else passes through."""

    def __init__(self, history: Any, runner: asyncio.Runner) -> None:
        self._history = history
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._history, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if inspect.isasyncgen(result):
                return self._iterate(result)
            return self._runner.run(result) if inspect.iscoroutine(result) else result

        return call

    def _iterate(self, agen: AsyncIterator[Any]) -> Iterator[Any]:
        while True:
            try:
                yield self._runner.run(anext(agen))  # type: ignore[arg-type]
            except StopAsyncIteration:
                return

    def __len__(self) -> int:
        return int(self._runner.run(self._history.len()))


@pytest.fixture(params=BACKENDS)
def make_history(request: pytest.FixtureRequest) -> Iterator[HistoryFactory]:
    """A factory of histories on one backend; each call may name its own conversation."""
    backend: str = request.param
    if backend.endswith("-staged"):
        request.getfixturevalue("monkeypatch").setattr(core, "STAGE_BYTES", 0)
        backend = backend.removesuffix("-staged")
    functions = backend.endswith("-functions")
    backend = backend.removesuffix("-functions")
    runner = asyncio.Runner()
    closers: list[Callable[[], Any]] = []
    if backend == "memory":

        def factory(conversation_id: str = "conv", **options: Any) -> Any:
            return InMemoryHistory(conversation_id, **options)

    elif backend == "fakeredis":
        client = fakeredis.FakeRedis()

        def factory(conversation_id: str = "conv", **options: Any) -> Any:
            return RedisHistory(client, conversation_id, **options)

    elif backend == "fakeredis-async":
        aclient = fakeredis.FakeAsyncRedis()
        closers.append(lambda: runner.run(aclient.aclose()))

        def factory(conversation_id: str = "conv", **options: Any) -> Any:
            return SyncOverAsync(AsyncRedisHistory(aclient, conversation_id, **options), runner)

    elif backend == "redis":
        client = request.getfixturevalue("real_redis")

        def factory(conversation_id: str = "conv", **options: Any) -> Any:
            return RedisHistory(client, conversation_id, **options)

    elif backend == "redis-async":
        url = request.getfixturevalue("redis_url")
        request.getfixturevalue("real_redis")  # flushed before the test
        real_async = redis.asyncio.Redis.from_url(url)
        closers.append(lambda: runner.run(real_async.aclose()))
        if functions:
            functions_only(real_async, request.getfixturevalue("real_redis"))

        def factory(conversation_id: str = "conv", **options: Any) -> Any:
            return SyncOverAsync(AsyncRedisHistory(real_async, conversation_id, **options), runner)

    else:
        cluster = request.getfixturevalue("cluster_client")
        if functions:
            functions_only(cluster, cluster)

        def factory(conversation_id: str = "conv", **options: Any) -> Any:
            return RedisHistory(cluster, conversation_id, **options)

    yield factory
    for close in closers:
        close()
    runner.close()


@pytest.fixture
def history(make_history: HistoryFactory) -> Any:
    """One conversation on the parametrized backend."""
    return make_history()
