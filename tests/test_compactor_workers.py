"""Custom and built-in compactors in real ``redis-history worker`` processes.

The compactor comes from ``REDIS_HISTORY_COMPACTOR`` (a dotted path into
tests/compactors_for_tests.py, or an alias), as in any deployment, and its
result goes through the same fenced write-back as a summary: a worker that lost
its lock while a custom compactor ran writes nothing.
"""

from __future__ import annotations

import pytest
import redis
from samples import BIG_OUTPUT
from worker_processes import DEADLINE, FAULT_POLICY, Workers, refused_after_a_pause

from redis_history import Message, RedisHistory, ToolCall
from redis_history.compaction.compactors import elided_stub
from redis_history.compaction.jobs import CompactionQueue

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]

KEEP_LAST_TURN = "compactors_for_tests:KeepLastTurn"


def seeded(client: redis.Redis, conversation: str, turns: int, output: str) -> RedisHistory:
    """A prompt and ``turns`` turns, each calling a tool that answers ``output``, every
    message tagged with its conversation (which the worker doubles' summarizers read)."""
    tag = {"conversation": conversation}
    history = RedisHistory(client, conversation, namespace="tenant", token_counter="heuristic")
    history.append(Message.system("You are a travel agent.", metadata=tag))
    for n in range(turns):
        key = f"{conversation}.{n:03d}"
        history.append_many([
            Message.user(f"question {n} about fares", id=f"{key}.u", metadata=tag),
            Message.assistant(
                "", tool_calls=[ToolCall(id=f"{key}.c", name="fares")], id=f"{key}.a", metadata=tag
            ),
            Message.tool(output, tool_call_id=f"{key}.c", id=f"{key}.t", metadata=tag),
            Message.assistant(f"The fare is 790 EUR ({n}).", id=f"{key}.r", metadata=tag),
        ])  # fmt: skip
    return history


def test_a_worker_runs_a_custom_compactor_named_by_dotted_path(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """A worker process loads the compactor from its settings, hands it the conversation's
    identity and policy, and writes its summary and kept turn back; nothing is lost."""
    history = seeded(real_redis, "conv", 4, "{}")
    before = history.snapshot()
    assert history.maybe_compact(queue, FAULT_POLICY)
    worker = workers.start("Recording", burst=True, compactor=KEEP_LAST_TURN)
    assert worker.wait(DEADLINE) == 0, workers.log(worker)
    assert "compaction job=" in workers.log(worker)
    live = history.snapshot()
    assert live[0].metadata.get("summary") is True, workers.log(worker)
    assert live[0].metadata["for"] == {
        "namespace": "tenant",
        "conversation_id": "conv",
        "keep_last_turns": 1,
    }
    assert "recorded" in live[0].content, "the worker's summarizer wrote the summary"
    assert live[1:] == before[9:], "the prefix's newest turn and the tail are kept verbatim"
    assert history.transcript() == before
    assert queue.failed_job_registry.count == 0


def test_a_worker_elides_old_tool_output_by_alias(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """REDIS_HISTORY_COMPACTOR=elide-tool-output: old bulky results become stubs, every id
    and pair stays, the last turn is untouched, the originals are in the transcript."""
    history = seeded(real_redis, "conv", 3, BIG_OUTPUT)
    before = history.snapshot()
    assert history.maybe_compact(queue, FAULT_POLICY)
    worker = workers.start("Recording", burst=True, compactor="elide-tool-output")
    assert worker.wait(DEADLINE) == 0, workers.log(worker)
    live = history.snapshot()
    assert [m.id for m in live] == [m.id for m in before], workers.log(worker)
    stub = elided_stub("fares", len(BIG_OUTPUT))
    assert [m.content for m in live if m.role == "tool"] == [stub, stub, BIG_OUTPUT]
    assert history.transcript() == before
    assert [len(turn.tool_pairs) for turn in history.turns()] == [1, 1, 1]
    assert not real_redis.lrange("test:summaries", 0, -1), "eliding summarizes nothing"


def test_a_paused_worker_running_a_custom_compactor_cannot_write_back(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """A worker stopped past its lock's TTL inside a custom compactor is refused on waking;
    the conversation stays exactly as the worker that compacted meanwhile left it."""
    history = seeded(real_redis, "conv", 6, "{}")
    after_other = refused_after_a_pause(workers, queue, history, FAULT_POLICY, KEEP_LAST_TURN)
    assert "for" not in after_other[0].message.metadata, "with the default compactor"
