"""A manager given a queue (``with_extraction``) enqueues each completed turn's extraction:
a worker process extracts the facts, and another pod's manager recalls them; the asyncio
manager enqueues off the event loop; a manager that cannot name its conversation is refused
when it is configured."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Sequence

import pytest
import redis
import redis.asyncio
from commands import clean_env, run_cli
from rq.job import Job

from redis_history import (
    AsyncRedisHistory,
    Message,
    RedisHistory,
    StoreUnavailableError,
    SummarizerError,
)
from redis_history.compaction.jobs import EXTRACTION_FUNCTION, CompactionQueue, compaction_queue
from redis_history.compaction_policy import CompactionContext
from redis_history.context import AsyncHistoryManager, HistoryManager, HistoryManagerConfig
from redis_history.context.manager import MEMORY_HEADER, ExtractionQueue
from redis_history.demo.server import RedisServer
from redis_history.memory import MemoryFilters, RedisLongTermMemory

pytestmark = pytest.mark.real_redis

PROMPT = "You are a travel agent."
AGENT = "travel-agent"
WHO = MemoryFilters(AGENT, "u-1")


class ThreadNoting(CompactionQueue):
    """The project's queue, noting the thread each enqueue runs in."""

    threads: list[int]

    def extract(self, history: RedisHistory, agent_id: str, user_id: str | None = None) -> Job:
        self.threads.append(threading.get_ident())
        return super().extract(history, agent_id, user_id)


class Failing:
    """A summarizer that always fails."""

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        raise SummarizerError("the summarizer is down")


def queued(queue: CompactionQueue) -> list[str | None]:
    """The functions of the jobs waiting on ``queue``, in order."""
    return [job.func_name for job in queue.jobs]


def burst_worker(redis_url: str) -> str:
    """Run ``redis-history worker --burst`` in its own process to its end; its output."""
    result = run_cli(
        "worker",
        "--burst",
        "--redis-url",
        redis_url,
        env=clean_env(REDIS_HISTORY_EXTRACTOR="rules"),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def test_a_pods_turn_is_extracted_by_a_worker_and_recalled_into_another_pods_request(
    real_redis: redis.Redis, redis_server: RedisServer, redis_url: str
) -> None:
    """Pod A's ``on_turn_complete`` (summarization off) enqueues one extraction job and does
    not extract; a worker process extracts the turn's fact; pod B, on its own client, recalls
    it into its next request's system message."""
    queue = compaction_queue(real_redis, "redis-history")
    plugged: ExtractionQueue = queue  # the project's queue is one, for the type checker too
    pod_a = RedisHistory(real_redis, "conv-trip")
    manager_a = HistoryManager(HistoryManagerConfig(), history=pod_a).with_extraction(plugged)
    assert not manager_a.config.enable_summarization
    user = Message.user("I live in Porto. Which museums open on Mondays?")
    prepared = manager_a.prepare_messages(2000, PROMPT, pod_a.snapshot(), [user])
    pod_a.append_many([user, Message.assistant("Serralves opens on Mondays.")])
    assert manager_a.on_turn_complete(prepared.dropped, AGENT, "u-1", "conv-trip") is None
    assert queued(queue) == [EXTRACTION_FUNCTION]
    assert RedisLongTermMemory(real_redis).list(WHO) == []  # the pod extracted nothing

    assert "status=extracted messages=2 facts=1" in burst_worker(redis_url)
    assert queue.count == 0
    assert queue.failed_job_registry.count == 0

    client_b = redis_server.client()
    pod_b = RedisHistory(client_b, "conv-trip")
    config = HistoryManagerConfig(enable_long_term_memory=True)
    memory_b = RedisLongTermMemory(client_b)
    manager_b = HistoryManager(config, history=pod_b).with_memory(memory_b)
    ask = Message.user("Any tram tips for Porto?")
    request = manager_b.prepare_messages(2000, PROMPT, pod_b.snapshot(), [ask], WHO)
    system = request.messages[0].content
    assert f"{MEMORY_HEADER}\n- Lives in Porto." in system
    assert request.diagnostics.memories_kept == 1
    (fact,) = memory_b.list(WHO)
    assert fact.metadata["conversation_id"] == "conv-trip"
    client_b.close()


def test_each_turn_enqueues_and_the_next_extraction_reads_only_the_new_messages(
    real_redis: redis.Redis, redis_url: str
) -> None:
    """Extraction is enqueued at every turn, also when nothing was evicted: the job id is the
    conversation's and owner's, and a later run extracts only the messages stored since."""
    queue = compaction_queue(real_redis, "redis-history")
    pod = RedisHistory(real_redis, "conv-two")
    manager = HistoryManager(history=pod).with_extraction(queue)
    pod.append_many([Message.user("I have two cats."), Message.assistant("Lovely.")])
    manager.on_turn_complete([], AGENT, "u-1")
    assert "status=extracted messages=2 facts=1" in burst_worker(redis_url)
    pod.append_many([Message.user("I prefer aisle seats."), Message.assistant("Noted.")])
    manager.on_turn_complete([], AGENT, "u-1")
    assert "status=extracted messages=2 facts=1" in burst_worker(redis_url)
    texts = {record.text for record in RedisLongTermMemory(real_redis).list(WHO)}
    assert texts == {"Has two cats.", "Prefers aisle seats."}


def test_extraction_is_enqueued_before_summarizing_and_survives_a_failed_summary(
    real_redis: redis.Redis,
) -> None:
    """With summarization on, the extraction is enqueued first: a summarizer that fails
    raises its error, and the turn's extraction is queued all the same."""
    queue = compaction_queue(real_redis, "redis-history")
    pod = RedisHistory(real_redis, "conv-sum")
    config = HistoryManagerConfig(enable_summarization=True)
    manager = HistoryManager(config, history=pod).with_extraction(queue)
    manager.with_summarizer(Failing())
    turn = [Message.user("I live in Porto."), Message.assistant("Nice.")]
    pod.append_many(turn)
    with pytest.raises(SummarizerError):
        manager.on_turn_complete(pod.snapshot(), AGENT, "u-1")
    assert queued(queue) == [EXTRACTION_FUNCTION]


def test_an_asyncio_pod_enqueues_off_the_event_loop(
    real_redis: redis.Redis, redis_url: str
) -> None:
    """AsyncHistoryManager's ``on_turn_complete`` (summarization on) enqueues the extraction
    in a worker thread, not on the loop's; the worker extracts it into the owner's memory."""
    queue = ThreadNoting("redis-history", real_redis)
    queue.threads = []

    async def turn() -> int:
        aclient = redis.asyncio.Redis.from_url(redis_url)
        history = AsyncRedisHistory(aclient, "conv-async")
        config = HistoryManagerConfig(enable_summarization=True)
        manager = AsyncHistoryManager(config, history=history).with_extraction(queue)
        await history.append_many([Message.user("I have a dog."), Message.assistant("Nice.")])
        await manager.on_turn_complete([], AGENT, "u-1")
        await aclient.aclose()
        return threading.get_ident()

    loop_thread = asyncio.run(turn())
    assert len(queue.threads) == 1
    assert queue.threads[0] != loop_thread
    assert queued(queue) == [EXTRACTION_FUNCTION]
    assert "status=extracted messages=2 facts=1" in burst_worker(redis_url)
    assert [r.text for r in RedisLongTermMemory(real_redis).list(WHO)] == ["Has a dog."]


def test_a_manager_without_its_conversation_is_refused_extraction(
    real_redis: redis.Redis,
) -> None:
    """``with_extraction`` on a manager made without ``history=`` raises ValueError at once
    (the job reads the conversation from Redis), for both managers; nothing is enqueued."""
    queue = compaction_queue(real_redis, "redis-history")
    with pytest.raises(ValueError, match="history="):
        HistoryManager().with_extraction(queue)
    with pytest.raises(ValueError, match="history="):
        AsyncHistoryManager().with_extraction(queue)
    assert queue.count == 0


def test_a_queue_without_a_blocking_extract_is_refused(real_redis: redis.Redis) -> None:
    """A queue with no ``extract``, or whose ``extract`` is a coroutine, is a TypeError when
    it is given."""

    class Coroutine:
        async def extract(
            self, history: RedisHistory, agent_id: str, user_id: str | None = None
        ) -> None:
            pass

    manager = HistoryManager(history=RedisHistory(real_redis, "c"))
    with pytest.raises(TypeError, match="blocking extract"):
        manager.with_extraction(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="blocking extract"):
        manager.with_extraction(Coroutine())


def test_an_unreachable_queue_fails_the_turn_with_a_typed_error(real_redis: redis.Redis) -> None:
    """The queue's Redis down: ``on_turn_complete`` raises StoreUnavailableError, not a
    redis-py error."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    manager = HistoryManager(history=RedisHistory(real_redis, "c"))
    manager.with_extraction(compaction_queue(down, "redis-history"))
    with pytest.raises(StoreUnavailableError):
        manager.on_turn_complete([], AGENT, "u-1")
    down.close()
