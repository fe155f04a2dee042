"""The sync and asyncio twins: each operation written once, a plain method of the sync twin
and a coroutine of the asyncio one, with the same signature; the in-memory double and its
asyncio twin satisfy the ``History`` and ``AsyncHistory`` protocols; one frozen options
object."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest

from redis_history import (
    AsyncHistory,
    AsyncRedisHistory,
    History,
    HistoryOptions,
    Message,
    RedisHistory,
    RoleOrderError,
)
from redis_history.context import AsyncHistoryManager, HistoryManager
from redis_history.memory import AsyncRedisLongTermMemory, RedisLongTermMemory
from redis_history.testing import AsyncInMemoryHistory, InMemoryHistory
from redis_history.wire.twins import AsyncRunner, Runner, twin

# mypy checks these: each double, and each Redis history, against its protocol.
_SYNC: tuple[Callable[[], History], ...] = (
    InMemoryHistory,
    lambda: RedisHistory(fakeredis.FakeRedis(), "c"),
)
_ASYNC: tuple[Callable[[], AsyncHistory], ...] = (
    AsyncInMemoryHistory,
    lambda: AsyncRedisHistory(fakeredis.FakeAsyncRedis(), "c"),
)

TWINS = [
    (RedisHistory, AsyncRedisHistory),
    (RedisLongTermMemory, AsyncRedisLongTermMemory),
    (HistoryManager, AsyncHistoryManager),
    (InMemoryHistory, AsyncInMemoryHistory),
]


def _protocol_methods(protocol: type) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if callable(value) and (not name.startswith("_") or name == "__len__")
    ]


def _without_self(function: Any) -> inspect.Signature:
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if parameters and parameters[0].name in ("self", "front"):
        parameters = parameters[1:]
    return signature.replace(parameters=parameters, return_annotation=inspect.Parameter.empty)


@pytest.mark.parametrize("make", _SYNC)
def test_the_sync_histories_satisfy_history(make: Callable[[], History]) -> None:
    history = make()
    assert isinstance(history, History)
    for name in _protocol_methods(History):
        method = getattr(history, name)
        assert not inspect.iscoroutinefunction(method), name
        assert _without_self(method) == _without_self(getattr(History, name)), name


@pytest.mark.parametrize("make", _ASYNC)
def test_the_asyncio_histories_satisfy_async_history(make: Callable[[], AsyncHistory]) -> None:
    history = make()
    assert isinstance(history, AsyncHistory)
    assert not isinstance(history, History)  # no len(): it would have to block
    for name in _protocol_methods(AsyncHistory):
        method = getattr(history, name)
        if name == "iter_transcript":
            assert inspect.isasyncgenfunction(method)
        else:
            assert inspect.iscoroutinefunction(method), name
        assert _without_self(method) == _without_self(getattr(AsyncHistory, name)), name


def test_the_two_protocols_name_the_same_operations() -> None:
    assert set(_protocol_methods(History)) - set(_protocol_methods(AsyncHistory)) == {"__len__"}


@pytest.mark.parametrize(("sync", "asyncio_twin"), TWINS)
def test_each_twin_has_the_same_public_methods_as_coroutines(
    sync: type, asyncio_twin: type
) -> None:
    """The asyncio twin has each public method of the sync one, with the same arguments;
    the twins' operations are one function each (a ``twin``), not two."""
    public = {n for n in dir(sync) if not n.startswith("_") and callable(getattr(sync, n))}
    deprecated = {"aprepare_messages", "aon_turn_complete", "asummaries"}
    shared = 0
    for name in sorted(public - deprecated - {"run", "execute", "from_url"}):
        ours, theirs = getattr(sync, name), getattr(asyncio_twin, name)
        assert _without_self(ours) == _without_self(theirs), name
        made = getattr(ours, "__wrapped__", None)
        if made is not None and made is getattr(theirs, "__wrapped__", None):
            shared += 1  # one function makes the work of both
            assert not inspect.iscoroutinefunction(ours)
            assert inspect.iscoroutinefunction(theirs)
    assert issubclass(asyncio_twin, AsyncRunner)
    if sync is not InMemoryHistory:
        assert issubclass(sync, Runner)
        assert shared >= 3, "the operations are written once, as twins"


def test_a_twin_outside_a_runner_is_bound_per_access() -> None:
    """A class that is no runner holds the operation itself; its instances bind it."""

    class Shared:
        @twin
        def double(self, n: int) -> Any:
            return n

    class Sync(Shared, Runner):
        def run(self, work: Any) -> Any:
            return work * 2

    assert isinstance(inspect.getattr_static(Shared, "double"), twin)
    assert Sync().double(21) == 42
    assert Shared.double(Sync(), 4) == 8  # the twin called on a class, given a front end


def test_a_twin_is_a_method_of_one_and_a_coroutine_of_the_other() -> None:
    sync = RedisHistory(fakeredis.FakeRedis(), "c")
    sync.append(Message.user("hi"))
    assert sync.len() == len(sync) == 1
    assert RedisHistory.len(sync) == 1  # called on the class, given the history
    assert RedisHistory.append.__doc__ == AsyncRedisHistory.append.__doc__
    assert "Add one message at the tail" in (RedisHistory.append.__doc__ or "")

    async def main() -> int:
        history = AsyncRedisHistory(fakeredis.FakeAsyncRedis(), "c")
        pending = history.append(Message.user("hi"))
        assert inspect.iscoroutine(pending)
        await pending
        return await history.len()

    assert asyncio.run(main()) == 1


def test_the_asyncio_double_is_the_model_and_raises_when_awaited() -> None:
    """``AsyncInMemoryHistory`` runs ``InMemoryHistory``'s model: what it stores is the
    model's, and an error is raised by the await, not by the call."""

    async def main() -> AsyncInMemoryHistory:
        history = AsyncInMemoryHistory(InMemoryHistory("c", namespace="t"))
        await history.append_many([Message.user("hi"), Message.assistant("hello")])
        refused = history.append(Message.assistant("again"))
        with pytest.raises(RoleOrderError):
            await refused
        assert [m.content async for m in history.iter_transcript(1)] == ["hi", "hello"]
        assert await history.token_estimate() == history.model.token_estimate()
        return history

    history = asyncio.run(main())
    assert [m.content for m in history.model.snapshot()] == ["hi", "hello"]
    assert repr(history) == "AsyncInMemoryHistory('t'/'c')"


def test_options_are_one_frozen_object_checked_once() -> None:
    options = HistoryOptions(token_counter="heuristic", max_message_bytes=1024, ttl=60)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.ttl = 1  # type: ignore[misc]
    assert options.counter.name == "heuristic"
    with pytest.raises(ValueError, match="max_message_bytes"):
        HistoryOptions(max_message_bytes=0)
    with pytest.raises(TypeError, match="validate must be a bool"):
        HistoryOptions(validate="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword"):
        RedisHistory(fakeredis.FakeRedis(), "c", max_messages=3)  # type: ignore[call-arg]


def test_keywords_override_the_options_and_a_fork_keeps_them() -> None:
    client = fakeredis.FakeRedis()
    options = HistoryOptions(max_message_bytes=4096, ttl=60)
    history = RedisHistory(client, "c", options=options, validate=False)
    assert history.options == dataclasses.replace(options, validate=False)
    assert options.validate  # the object given is not changed
    history.append(Message.user("a"))
    history.append(Message.user("b"))  # not validated
    fork = history.fork("d", at=history.snapshot()[-1].id)
    assert fork.options is history.options
    assert fork.ttl() == 60.0
    model = InMemoryHistory("c", options=options)
    assert model.max_message_bytes == 4096
