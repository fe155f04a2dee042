"""AsyncHistoryManager on an asyncio pod: ``prepare_messages``, ``on_turn_complete`` and
``summaries`` on an ``AsyncRedisHistory`` and an ``AsyncRedisLongTermMemory``, on real Redis
and on a cluster; the same rules as the sync methods, and no blocking call on the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
from summarizers_for_tests import Counting

from redis_history import AsyncRedisHistory, Message, RedisHistory
from redis_history.compaction_policy import CompactionContext
from redis_history.context import AsyncHistoryManager, HistoryManager, HistoryManagerConfig
from redis_history.demo.server import LocalCluster, RedisServer
from redis_history.memory import (
    AsyncRedisLongTermMemory,
    InMemoryMemory,
    MemoryFilters,
    RedisLongTermMemory,
)
from redis_history.wire import lane as _lane

PROMPT = "You are a travel agent."
AGENT = "agent-1"

pytestmark = pytest.mark.real_redis


class AsyncSummarizer:
    """A summarizer whose ``summarize`` is a coroutine."""

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """The number of messages, after yielding to the loop."""
        await asyncio.sleep(0)
        self.calls += 1
        return f"Earlier: {len(messages)} messages about flights."


def config(**options: Any) -> HistoryManagerConfig:
    return HistoryManagerConfig(enable_summarization=True, token_counter="o200k_base", **options)


async def fill(history: AsyncRedisHistory, turns: int) -> None:
    await history.append(Message.system(PROMPT))
    for i in range(turns):
        await history.append_many(
            [Message.user(f"flight question {i} " * 20), Message.assistant("ok " * 20)]
        )


async def turn(
    manager: AsyncHistoryManager, history: AsyncRedisHistory, filters: MemoryFilters | None = None
) -> Any:
    """The next turn's request, with room for about two turns of history."""
    return await manager.prepare_messages(
        320, PROMPT, await history.snapshot(), [Message.user("next flight?")], filters
    )


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run an asyncio test body on a loop of its own."""
    asyncio.run(test())


@pytest.fixture(params=["redis", "cluster"])
def make_aclient(request: pytest.FixtureRequest) -> Callable[[], Any]:
    """Makes an asyncio client (inside the test's loop) on the session's flushed
    redis-server, or on the flushed local cluster."""
    if request.param == "redis":
        request.getfixturevalue("real_redis")  # flushed
        url: str = request.getfixturevalue("redis_url")
        return lambda: redis.asyncio.Redis.from_url(url)
    request.getfixturevalue("cluster_client")  # flushed
    cluster: LocalCluster = request.getfixturevalue("redis_cluster")
    return lambda: redis.asyncio.cluster.RedisCluster.from_url(cluster.url)


def test_an_asyncio_pod_works_end_to_end(make_aclient: Callable[[], Any]) -> None:
    """Summaries are shared in Redis, recalled memories come from the asyncio memory, and the
    next request of another asyncio pod carries both; on Redis and on a cluster."""
    run(lambda: an_asyncio_pod(make_aclient()))


async def an_asyncio_pod(aclient: Any) -> None:
    summarizer = Counting()
    memory = AsyncRedisLongTermMemory(aclient, namespace="tenant-a")
    history = AsyncRedisHistory(aclient, "conv-1", namespace="tenant-a")
    await fill(history, 6)
    await memory.store("Prefers aisle seats on flights", {"agent_id": AGENT, "user_id": "u-1"})
    settings = config(enable_long_term_memory=True)
    manager = AsyncHistoryManager(settings, history=history).with_summarizer(summarizer)
    manager.with_memory(memory)
    filters = MemoryFilters(AGENT, "u-1")
    prepared = await turn(manager, history, filters)
    assert "Prefers aisle seats on flights" in prepared.messages[0].content
    assert prepared.diagnostics.memories_kept == 1
    assert prepared.dropped
    summary = await manager.on_turn_complete(prepared.dropped, AGENT, "u-1", "conv-1")
    assert summary is not None
    assert summary.startswith("Previously: flight que")
    assert threading.get_ident() not in summarizer.threads  # off the event loop
    assert await manager.on_turn_complete(prepared.dropped, AGENT, "u-1", "conv-1") is None
    assert len(summarizer.calls) == 1
    stored = await memory.list(MemoryFilters(AGENT, "u-1", conversation_id="conv-1"))
    assert [r.text for r in stored] == [summary]
    assert stored[0].metadata["kind"] == "summary"

    other_history = AsyncRedisHistory(aclient, "conv-1", namespace="tenant-a")
    other = AsyncHistoryManager(settings, history=other_history).with_memory(memory)
    assert await other.summaries() == [summary]
    request = await turn(other, other_history, filters)
    system = request.messages[0].content
    assert system.startswith(PROMPT)
    assert system.endswith(summary)
    assert "Prefers aisle seats on flights" in system
    assert request.request["messages"][0] == {"role": "system", "content": system}
    await aclient.aclose()


def test_a_summary_an_asyncio_pod_makes_reaches_a_sync_pod(redis_server: RedisServer) -> None:
    run(lambda: a_summary_an_asyncio_pod_makes_reaches_a_sync_pod(redis_server))


async def a_summary_an_asyncio_pod_makes_reaches_a_sync_pod(redis_server: RedisServer) -> None:
    """The two fronts share one layout: a sync pod's next request carries what an asyncio
    pod summarized, and the other way round."""
    sync_client = redis_server.client()
    sync_client.flushall()
    aclient = redis.asyncio.Redis.from_url(redis_server.url)
    summarizer = Counting()
    history = AsyncRedisHistory(aclient, "conv-1")
    await fill(history, 6)
    amanager = AsyncHistoryManager(config(), history=history).with_summarizer(summarizer)
    prepared = await turn(amanager, history)
    summary = await amanager.on_turn_complete(prepared.dropped, AGENT)
    sync_history = RedisHistory(sync_client, "conv-1")
    manager = HistoryManager(config(), history=sync_history).with_summarizer(summarizer)
    request = manager.prepare_messages(
        320, PROMPT, sync_history.snapshot(), [Message.user("next flight?")]
    )
    assert request.messages[0].content == f"{PROMPT}\n\n{summary}"
    sync_history.append_many([Message.user("more " * 80), Message.assistant("sure " * 80)])
    later = manager.prepare_messages(
        320, PROMPT, sync_history.snapshot(), [Message.user("next flight?")]
    )
    second = manager.on_turn_complete(later.dropped, AGENT)
    assert second is not None
    assert await amanager.summaries() == [summary, second]
    await aclient.aclose()


def test_four_asyncio_pods_completing_one_turn_summarize_it_once(
    redis_server: RedisServer, real_redis: redis.Redis
) -> None:
    run(lambda: four_asyncio_pods_completing_one_turn_summarize_it_once(redis_server, real_redis))


async def four_asyncio_pods_completing_one_turn_summarize_it_once(
    redis_server: RedisServer, real_redis: redis.Redis
) -> None:
    """Four asyncio pods, each on its own client, complete the same turn at once on one
    loop: the summarizer runs once, and each pod's next request carries its summary."""
    summarizer = Counting()
    clients = [redis.asyncio.Redis.from_url(redis_server.url) for _ in range(4)]
    await fill(AsyncRedisHistory(clients[0], "conv-1"), 6)
    pods = []
    for client in clients:
        history = AsyncRedisHistory(client, "conv-1")
        pods.append(
            (history, AsyncHistoryManager(config(), history=history).with_summarizer(summarizer))
        )
    requests = [await turn(manager, history) for history, manager in pods]
    results = await asyncio.gather(
        *(m.on_turn_complete(r.dropped, AGENT) for (_, m), r in zip(pods, requests, strict=True))
    )
    assert len(summarizer.calls) == 1
    [summary] = [r for r in results if r is not None]
    for history, manager in pods:
        assert (await turn(manager, history)).messages[0].content == f"{PROMPT}\n\n{summary}"
    for client in clients:
        await client.aclose()


def test_the_coroutines_make_no_blocking_redis_call(
    redis_url: str, real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(lambda: the_coroutines_make_no_blocking_redis_call(redis_url, real_redis, monkeypatch))


async def the_coroutines_make_no_blocking_redis_call(
    redis_url: str, real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With redis-py's blocking send and the store's sync lane made to fail, a whole asyncio
    turn (recall, shared summaries, claim, summary, memory store) still runs."""

    def blocked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a blocking Redis call on the event loop")

    aclient = redis.asyncio.Redis.from_url(redis_url)
    memory = AsyncRedisLongTermMemory(aclient)
    history = AsyncRedisHistory(aclient, "conv-1")
    await fill(history, 6)
    await memory.store("Prefers aisle seats on flights", {"agent_id": AGENT})
    monkeypatch.setattr(_lane, "send", blocked)
    monkeypatch.setattr(_lane, "execute", blocked)
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", blocked)
    summarizer = AsyncSummarizer()
    settings = config(enable_long_term_memory=True)
    manager = AsyncHistoryManager(settings, history=history).with_summarizer(summarizer)
    manager.with_memory(memory)
    prepared = await turn(manager, history, MemoryFilters(AGENT))
    assert prepared.diagnostics.memories_kept == 1
    summary = await manager.on_turn_complete(prepared.dropped, AGENT)
    assert summary is not None
    assert summarizer.calls == 1  # a coroutine summarizer is awaited
    assert await manager.summaries() == [summary]
    with pytest.raises(AssertionError, match="blocking"):
        RedisHistory(real_redis, "conv-1").len()  # the patches do catch a blocking call
    await aclient.aclose()


def test_a_blocking_history_or_memory_is_refused_before_anything_is_sent(
    redis_url: str, real_redis: redis.Redis
) -> None:
    run(
        lambda: a_blocking_history_or_memory_is_refused_before_anything_is_sent(
            redis_url, real_redis
        )
    )


async def a_blocking_history_or_memory_is_refused_before_anything_is_sent(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """The asyncio manager refuses a ``RedisHistory`` and a ``RedisLongTermMemory`` (they would
    block the loop); the sync one refuses an ``AsyncRedisHistory``, an asyncio memory and an
    asyncio summarizer. Nothing is written either way."""
    aclient = redis.asyncio.Redis.from_url(redis_url)
    ahistory = AsyncRedisHistory(aclient, "conv-1")
    await fill(ahistory, 6)
    history = RedisHistory(real_redis, "conv-1")
    snapshot = history.snapshot()
    dropped = snapshot[1:5]
    before = {key: real_redis.dump(key) for key in real_redis.keys("*")}

    with pytest.raises(TypeError, match="history must be AsyncRedisHistory, got RedisHistory"):
        AsyncHistoryManager(config(), history=history)
    async_manager = HistoryManager(config(), history=ahistory)
    with pytest.raises(TypeError, match="AsyncRedisHistory: use an AsyncHistoryManager"):
        async_manager.prepare_messages(320, PROMPT, snapshot)
    with pytest.raises(TypeError, match="AsyncRedisHistory: use an AsyncHistoryManager"):
        async_manager.on_turn_complete(dropped, AGENT)
    with pytest.raises(TypeError, match="AsyncRedisHistory: use an AsyncHistoryManager"):
        async_manager.summaries()

    remembering = config(enable_long_term_memory=True)
    blocking = AsyncHistoryManager(remembering).with_memory(RedisLongTermMemory(real_redis))
    with pytest.raises(TypeError, match="RedisLongTermMemory, which blocks"):
        await blocking.on_turn_complete(dropped, AGENT)
    asyncio_memory = HistoryManager(remembering).with_memory(AsyncRedisLongTermMemory(aclient))
    with pytest.raises(TypeError, match="is asyncio"):
        asyncio_memory.prepare_messages(320, PROMPT, snapshot, memory_filters=MemoryFilters(AGENT))
    assert asyncio_memory.summaries() == []  # no memory needed: no refusal
    asyncio_summarizer = HistoryManager(config()).with_summarizer(AsyncSummarizer())
    with pytest.raises(TypeError, match=r"summarizer \(AsyncSummarizer\) is asyncio"):
        asyncio_summarizer.on_turn_complete(dropped, AGENT)
    assert {key: real_redis.dump(key) for key in real_redis.keys("*")} == before
    await aclient.aclose()


def test_the_a_prefixed_coroutines_of_the_sync_manager_still_work_and_are_deprecated(
    redis_server: RedisServer,
) -> None:
    run(lambda: the_a_prefixed_coroutines_still_work(redis_server))


async def the_a_prefixed_coroutines_still_work(redis_server: RedisServer) -> None:
    """``aprepare_messages``, ``aon_turn_complete`` and ``asummaries`` of a ``HistoryManager``
    given an ``AsyncRedisHistory`` (the API before ``AsyncHistoryManager``) run the asyncio
    manager's plans, each with a ``DeprecationWarning`` naming its replacement; given a
    ``RedisHistory``, they refuse it as before."""
    redis_server.client().flushall()
    aclient = redis.asyncio.Redis.from_url(redis_server.url)
    history = AsyncRedisHistory(aclient, "conv-1")
    await fill(history, 6)
    manager = HistoryManager(config(), history=history).with_summarizer(Counting())
    with pytest.warns(DeprecationWarning, match="use AsyncHistoryManager.prepare_messages"):
        prepared = await manager.aprepare_messages(
            320, PROMPT, await history.snapshot(), [Message.user("next flight?")]
        )
    assert prepared.dropped
    with pytest.warns(DeprecationWarning, match="use AsyncHistoryManager.on_turn_complete"):
        summary = await manager.aon_turn_complete(prepared.dropped, AGENT)
    with pytest.warns(DeprecationWarning, match="use AsyncHistoryManager.summaries"):
        assert await manager.asummaries() == [summary]
    assert await AsyncHistoryManager(config(), history=history).summaries() == [summary]
    blocking = HistoryManager(config(), history=RedisHistory(redis_server.client(), "conv-1"))
    with (
        pytest.warns(DeprecationWarning, match="asummaries is deprecated"),
        pytest.raises(TypeError, match="RedisHistory, which blocks"),
    ):
        await blocking.asummaries()
    await aclient.aclose()


def test_without_history_the_coroutines_keep_the_summaries_in_the_process() -> None:
    run(without_history_the_coroutines_keep_the_summaries_in_the_process)


async def without_history_the_coroutines_keep_the_summaries_in_the_process() -> None:
    """No ``history=``: the coroutines summarize and remember as the sync methods do, with an
    in-process memory, and touch no Redis."""
    summarizer = Counting()
    memory = InMemoryMemory()
    settings = config(enable_long_term_memory=True)
    manager = AsyncHistoryManager(settings).with_summarizer(summarizer).with_memory(memory)
    messages = [Message.system(PROMPT)]
    for i in range(6):
        messages += [Message.user(f"flight question {i} " * 20), Message.assistant("ok " * 20)]
    prepared = await manager.prepare_messages(
        320, PROMPT, messages, [Message.user("next?")], MemoryFilters(AGENT)
    )
    summary = await manager.on_turn_complete(prepared.dropped, AGENT)
    assert summary is not None
    assert await manager.summaries() == [summary]
    assert await manager.on_turn_complete(prepared.dropped, AGENT) is None
    assert [text for _, text, _ in memory.all()] == [summary]
