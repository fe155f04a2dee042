"""Background compaction with real ``redis-history worker`` processes on a real Redis.

Pods are processes appending whole turns while workers compact the same
conversations; faults are real signals: SIGKILL in the middle of a summary,
SIGSTOP past the lock's TTL, and a truncate while a summary is in flight.
Summarizers come from tests/worker_doubles.py, loaded by the workers through
``REDIS_HISTORY_SUMMARIZER`` like any deployment's.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import time
from typing import Any

import pytest
import redis
from rq import Worker
from rq.registry import FailedJobRegistry, StartedJobRegistry
from worker_processes import (
    DEADLINE,
    FAULT_POLICY,
    Workers,
    refused_after_a_pause,
    started_calls,
    wait_for,
)

from redis_history import CompactionPolicy, Message, RedisHistory, ToolCall
from redis_history.compaction.jobs import CompactionQueue, compaction_queue
from redis_history.roles import RoleState

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]


def turn(conversation: str, writer: str, n: int) -> list[Message]:
    """A question, a tool call and its result, and the answer, tagged with their conversation."""
    tag = {"conversation": conversation}
    key = f"{conversation}.{writer}.{n:03d}"
    return [
        Message.user(f"{writer} asks question {n} about fares " * 3, id=f"{key}.u", metadata=tag),
        Message.assistant(
            "", tool_calls=[ToolCall(id=f"{key}.c", name="fares")], id=f"{key}.a", metadata=tag
        ),
        Message.tool('{"fare": 790}' * 4, tool_call_id=f"{key}.c", id=f"{key}.t", metadata=tag),
        Message.assistant(f"The fare is 790 EUR ({n}). " * 3, id=f"{key}.r", metadata=tag),
    ]


def seeded(client: redis.Redis, conversation: str, turns: int) -> RedisHistory:
    """A conversation holding a system prompt and ``turns`` turns by writer ``seed``."""
    history = RedisHistory(client, conversation, token_counter="heuristic")
    history.append(
        Message.system("You are a travel agent.", metadata={"conversation": conversation})
    )
    for n in range(turns):
        history.append_many(turn(conversation, "seed", n))
    return history


def assert_whole(history: RedisHistory, written: dict[str, list[str]]) -> None:
    """Every written id is in the list or the archive exactly once, in its writer's order,
    each turn unbroken, and the live list is well formed."""
    transcript = [m.id for m in history.transcript() if m.role != "system"]
    assert len(transcript) == len(set(transcript)), "a message is in the list and the archive"
    assert sorted(transcript) == sorted(i for ids in written.values() for i in ids)
    for writer, ids in written.items():
        mine = set(ids)
        assert [i for i in transcript if i in mine] == ids, f"{writer}'s order changed"
    for start in range(0, len(transcript), 4):
        assert len({i.rsplit(".", 1)[0] for i in transcript[start : start + 4]}) == 1
    live = history.snapshot()
    RoleState().advance_all(live)  # role order and tool pairing hold
    for summary in (m for m in live if m.metadata.get("summary")):
        covered = [i for i in summary.metadata["covers"] if i in set(transcript)]
        assert len(covered) % 4 == 0, "a summary split a turn or a tool pair"


def _pod(  # noqa: PLR0917  (a multiprocessing target takes positional arguments)
    url: str, pod: int, names: list[str], turns: int, start: Any, out: Any
) -> None:
    """One agent pod: turns spread over the conversations, each followed by maybe_compact."""
    client = redis.Redis.from_url(url)
    queue = compaction_queue(connection=client, name="redis-history")
    histories = [RedisHistory(client, name, token_counter="heuristic") for name in names]
    written: dict[str, list[str]] = {name: [] for name in names}
    start.wait()
    for n in range(turns):
        history = histories[(pod + n) % len(histories)]
        history.advance_turn()
        messages = turn(history.conversation_id, f"pod{pod}", n)
        history.append_many(messages)
        written[history.conversation_id] += [m.id for m in messages]
        history.maybe_compact(queue, CONCURRENT_POLICY)
        time.sleep(0.03)  # the agent's LLM call, during which workers catch up
        if n % 3 == 0:  # also a job past the one-pending claim: only the lock keeps order now
            queue(history.core.compaction_request(CONCURRENT_POLICY))
    out.put((pod, written))
    client.close()


CONCURRENT_POLICY = CompactionPolicy(
    soft_tokens=400,
    hard_tokens=1_000_000,
    keep_last_turns=1,
    cooldown_turns=0,
    min_messages=2,
    lock_ttl_seconds=10,
)


def test_pods_and_two_workers_lose_nothing_and_never_overlap(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """Four pods append while two real workers compact the same conversations repeatedly:
    nothing lost or reordered, no turn or tool pair split, never two compactions at once."""
    names = ["conv-a", "conv-b"]
    for name in names:
        seeded(real_redis, name, 0)
    for _ in range(2):
        workers.start("Recording")
    wait_for(lambda: Worker.count(connection=real_redis) == 2, "both workers to listen")
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    pods = [
        context.Process(target=_pod, args=(workers.url, pod, names, 24, start, results))
        for pod in range(4)
    ]
    for pod in pods:
        pod.start()
    start.set()
    reports = [results.get(timeout=DEADLINE) for _ in pods]
    for pod in pods:
        pod.join()
        assert pod.exitcode == 0
    started = StartedJobRegistry(queue=queue)
    wait_for(lambda: queue.count == 0 and started.count == 0, "the workers to drain the queue")

    assert real_redis.lrange("test:overlaps", 0, -1) == []
    assert FailedJobRegistry(queue=queue).count == 0
    summaries = [json.loads(s) for s in real_redis.lrange("test:summaries", 0, -1)]
    for worker in workers.processes:
        assert "compacted dropped=" in workers.log(worker), "both workers compacted"
    for name in names:
        history = RedisHistory(real_redis, name, token_counter="heuristic")
        written = {f"pod{pod}": ids[name] for pod, ids in reports}
        assert_whole(history, written)
        assert sum(1 for s in summaries if s["conversation"] == name) >= 2
        assert history.snapshot()[0].metadata.get("summary"), "the conversation was compacted"


def test_a_worker_killed_mid_summary_leaves_the_lock_to_expire(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """SIGKILL during a summary writes nothing; the lock expires and a later compaction works."""
    history = seeded(real_redis, "conv", 6)
    before = history.entries()
    victim = workers.start("Blocking")
    assert history.maybe_compact(queue, FAULT_POLICY)
    (call,) = wait_for(lambda: started_calls(real_redis, "conv"), "the summary to start")
    assert real_redis.exists(history.keys.lock)
    workers.signal(victim, call["pid"], signal.SIGKILL)
    victim.wait()

    wait_for(lambda: not real_redis.exists(history.keys.lock), "the dead worker's lock to expire")
    assert history.entries() == before, "a killed worker wrote nothing"
    wait_for(lambda: history.maybe_compact(queue, FAULT_POLICY), "the lost job's claim to lapse")
    rescuer = workers.start("Recording", burst=True)
    assert rescuer.wait(DEADLINE) == 0, workers.log(rescuer)
    live = history.snapshot()
    assert live[0].metadata.get("summary")
    assert "recorded" in live[0].content
    assert_whole(history, {"seed": [e.message.id for e in before[1:]]})


def test_a_paused_worker_that_lost_its_lock_cannot_write_back(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """A worker stopped past its lock's TTL while another compacts is refused on waking;
    the conversation stays exactly as the other worker left it."""
    history = seeded(real_redis, "conv", 6)
    refused_after_a_pause(workers, queue, history, FAULT_POLICY)
    assert not any("call 1" in m.content for m in history.snapshot())


def test_a_truncate_during_the_summary_makes_the_write_back_stale(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """Truncating into the prefix being summarized refuses that write-back; the retry
    summarizes the fresh prefix, and the truncated messages appear nowhere."""
    history = seeded(real_redis, "conv", 10)
    messages = history.snapshot()
    workers.start("Blocking")
    queue(history.core.compaction_request(FAULT_POLICY))
    (first,) = wait_for(lambda: started_calls(real_redis, "conv"), "the summary to start")
    assert first["ids"] == [m.id for m in messages[:37]], "all but the last turn"

    history.truncate(21)  # keep the system prompt and five turns: part of that prefix is gone
    real_redis.rpush("test:release:conv", "go")
    calls = wait_for(
        lambda: started_calls(real_redis, "conv")[1:], "the retry from a fresh snapshot"
    )
    assert calls[0]["ids"] == [m.id for m in messages[:17]]
    wait_for(lambda: history.snapshot()[0].metadata.get("summary"), "the retry's write-back")

    live = history.snapshot()
    assert "call 2" in live[0].content
    assert [m.id for m in live[1:]] == [m.id for m in messages[17:21]]
    assert [m.id for m in history.transcript()] == [m.id for m in messages[:21]]
