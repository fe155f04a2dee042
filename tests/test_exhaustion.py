"""Compaction that gives up is not the end of compaction: a conversation too young to cut is
tried again once it has grown (twice the live length it gave up at), a job that cannot cut
is not enqueued, the thresholds see what is stored as well as what the model reported, and
the warning says why compaction gave up, with its numbers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import redis
from rq.job import Job, JobStatus
from worker_processes import Workers, wait_for

from redis_history import (
    CompactionPolicy,
    CompactionRequest,
    CompactionState,
    Message,
    RedisHistory,
    ToolCall,
)
from redis_history.admin import Target
from redis_history.admin.listing import conversation_stats
from redis_history.compaction.jobs import CompactionQueue
from redis_history.compaction.run import run_compaction
from redis_history.compaction_policy import CompactionFacts
from redis_history.context import HistoryManager, HistoryManagerConfig
from redis_history.testing import FakeSummarizer

POLICY = CompactionPolicy(
    soft_tokens=2_000, keep_last_turns=2, cooldown_turns=1, min_messages=2, archive_max_messages=200
)


def tool_turn(i: int, result_bytes: int = 10_000) -> list[Message]:
    """A user's question, a tool call, its result of ``result_bytes``, the answer."""
    return [
        Message.user(f"question {i}", id=f"u{i}", metadata={"conversation": "c"}),
        Message.assistant(tool_calls=[ToolCall(id=f"call{i}", name="search")], id=f"a{i}"),
        Message.tool(
            f"result {i} " + "lorem ipsum " * (result_bytes // 12),
            tool_call_id=f"call{i}",
            id=f"t{i}",
        ),
        Message.assistant(f"answer {i}", id=f"r{i}"),
    ]


def enqueued(queue: CompactionQueue, jobs: list[Job]) -> Callable[[CompactionRequest], None]:
    """A scheduler that enqueues on ``queue`` and keeps each job in ``jobs``."""
    return lambda request: jobs.append(queue(request))


def done(jobs: list[Job]) -> bool:
    """Whether every job ran to its end (RQ's status, which the worker sets last)."""
    return all(
        job.get_status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED) for job in jobs
    )


def test_a_conversation_too_young_to_cut_is_compacted_once_it_has_grown(
    workers: Workers, real_redis: redis.Redis, queue: CompactionQueue
) -> None:
    """One turn with a 10 KB tool result passes ``soft_tokens``: the job finds no cut and
    gives up; ten turns later the conversation is compacted, and it stays under the hard
    limit plus a turn from then on."""
    workers.start("Recording")
    history = RedisHistory(real_redis, "c", token_counter="heuristic")
    history.append(Message.system("You are a research assistant.", id="sys"))
    history.append_many(tool_turn(0))
    jobs: list[Job] = []
    assert history.maybe_compact(enqueued(queue, jobs), POLICY)
    wait_for(lambda: done(jobs), "the first job")
    facts = history.compaction_facts()
    assert facts.state.is_exhausted()
    assert (facts.gave_up_at, facts.gave_up) == (5, 1)  # no cut, at 5 live messages
    for i in range(1, 11):
        history.advance_turn()
        history.append_many(tool_turn(i))
        history.maybe_compact(enqueued(queue, jobs), POLICY)
        wait_for(lambda: done(jobs), "the jobs")
    assert all(job.get_status() == JobStatus.FINISHED for job in jobs)
    assert history.compaction_stats().compactions >= 1
    assert history.snapshot()[0].metadata.get("summary")
    assert len(history) < 20
    assert history.compaction_facts().tokens < POLICY.hard_tokens + 3 * 10_000


@pytest.mark.parametrize(
    ("facts", "due"),
    [
        # a young conversation over soft_tokens: no cut can exist in 4 live messages
        (CompactionFacts(5_000, 5_000, CompactionState.ready(), 4), False),
        (CompactionFacts(5_000, 5_000, CompactionState.ready(), 5), True),
        # the stored total counts though the model reported a trimmed request
        (CompactionFacts(1_500, 9_000, CompactionState.ready(), 40), True),
        (CompactionFacts(9_000, 1_500, CompactionState.ready(), 40), True),
        (CompactionFacts(1_500, 1_500, CompactionState.ready(), 40), False),
        # exhausted: tried again at twice the length it gave up at
        (CompactionFacts(5_000, 5_000, CompactionState.exhausted(), 9, 5, 1), False),
        (CompactionFacts(5_000, 5_000, CompactionState.exhausted(warned=True), 10, 5, 1), True),
        (CompactionFacts(1_000, 1_000, CompactionState.exhausted(), 10, 5, 1), False),
        # a conversation exhausted before the length was kept: tried again once
        (CompactionFacts(5_000, 5_000, CompactionState.exhausted(), 40, 0, 0), True),
        (CompactionFacts(200_000, 200_000, CompactionState.compacted_this_turn(1), 40), False),
        (CompactionFacts(200_000, 200_000, CompactionState.cooling(1), 40), True),
        (CompactionFacts(5_000, 5_000, CompactionState.cooling(1), 40), False),
    ],
)
def test_when_compaction_is_due(facts: CompactionFacts, due: bool) -> None:
    assert POLICY.due(facts) is due


def test_no_job_is_enqueued_that_cannot_cut(client: Any) -> None:
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(tool_turn(0))
    scheduled: list[CompactionRequest] = []
    assert history.compaction_facts().tokens > POLICY.soft_tokens
    assert not history.maybe_compact(scheduled.append, POLICY)
    history.append(Message.user("and then?"))
    assert history.maybe_compact(scheduled.append, POLICY)
    assert len(scheduled) == 1


def test_the_warning_says_why_and_when_compaction_is_tried_again(
    client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many([Message.system("s"), *tool_turn(0)])
    history.compaction_event("exhausted", 1)
    with caplog.at_level(logging.WARNING, "redis_history"):
        history.maybe_compact(lambda _request: None, POLICY)
    (record,) = caplog.records
    assert "found nothing to cut at 5 live messages" in record.message
    assert "keeps the last 2 whole turns" in record.message
    assert "tried again once it holds 10 live messages (now 5, " in record.message
    assert "hard limit" not in record.message


def test_the_readme_loop_keeps_the_stored_list_bounded(client: Any) -> None:
    """A manager trims each request to a 3,000-token budget and the pod reports the request's
    tokens: the estimate stays under ``soft_tokens`` while the stored list grows, so the
    thresholds compare the stored total too, and compaction keeps the list short."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    manager = HistoryManager(HistoryManagerConfig(), history=history)
    policy = CompactionPolicy(
        soft_tokens=4_000, hard_tokens=8_000, keep_last_turns=2, cooldown_turns=1, min_messages=2
    )
    lengths, reported = [], []
    for i in range(60):
        history.advance_turn()
        user = Message.user(f"question {i} " + "words " * 100)
        prepared = manager.prepare_messages(3_000, "You are terse.", history.snapshot(), [user])
        history.append_many([user, Message.assistant(f"answer {i} " + "words " * 100)])
        history.record_input_tokens(prepared.diagnostics.total)
        reported.append(prepared.diagnostics.total)
        scheduled: list[CompactionRequest] = []
        if history.maybe_compact(scheduled.append, policy):
            run_compaction(history, FakeSummarizer(), policy)
            history.release_compaction_claim(scheduled[0].job_id)
        lengths.append(len(history))
    assert max(reported) <= 3_000
    assert history.compaction_stats().compactions >= 3
    assert max(lengths[20:]) <= 2 * max(lengths[:20])  # flat: it was 120 messages at the end
    assert history.compaction_facts().stored < policy.hard_tokens


def test_stats_say_why_compaction_gave_up_and_what_is_stored(real_redis: redis.Redis) -> None:
    history = RedisHistory(real_redis, "c", namespace="t", token_counter="heuristic")
    history.append_many([Message.system("s"), *tool_turn(0)])
    target = Target(real_redis, "t")
    assert conversation_stats(target, "c").gave_up is None
    history.compaction_event("exhausted", 3)
    stats = conversation_stats(target, "c")
    assert stats.gave_up == {"reason": "tail over the hard limit", "at": 5}
    assert stats.stored_tokens == history.compaction_facts().stored > POLICY.soft_tokens


HARD = CompactionPolicy(
    soft_tokens=2_000, hard_tokens=8_000, keep_last_turns=2, cooldown_turns=1, min_messages=2
)


def test_over_the_hard_limit_old_tool_output_is_elided(client: Any) -> None:
    """The two turns the policy keeps hold more than ``hard_tokens`` after the summary: the
    job elides the bulky tool output of every turn but the newest, rather than give up."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append(Message.system("s", id="sys"))
    for i in range(3):
        history.append_many(tool_turn(i, 20_000))
    assert history.compaction_facts().tokens > HARD.hard_tokens
    result = run_compaction(history, FakeSummarizer(), HARD)
    assert result.status == "compacted"
    facts = history.compaction_facts()
    assert facts.tokens < HARD.hard_tokens
    assert facts.state == CompactionState.compacted_this_turn(1)
    live = history.snapshot()
    assert [m.id for m in live if m.metadata.get("elided")] == ["t1"]
    assert live[-2].content.startswith("result 2")  # the newest turn stays whole
    assert {m.id for m in history.transcript()} >= {"t0", "t1", "t2"}  # originals archived


def test_one_turn_over_the_hard_limit_is_exhausted_saying_so(
    client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many([Message.system("s"), *tool_turn(0, 60_000)])
    assert run_compaction(history, FakeSummarizer(), HARD).status == "exhausted"
    facts = history.compaction_facts()
    assert (facts.state, facts.gave_up) == (CompactionState.exhausted(), 3)
    with caplog.at_level(logging.WARNING, "redis_history"):
        history.maybe_compact(lambda _request: None, HARD)
    (record,) = caplog.records
    assert "over the hard limit (8000 tokens)" in record.message
    assert "ToolOutputElider" in record.message
