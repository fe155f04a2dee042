"""One compaction: cut at turn boundaries, fenced write-back, state updates, maybe_compact."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import fakeredis
import pytest
import redis
from faults import FaultProxy
from rq import Queue
from samples import turns

from redis_history import Message, RedisHistory, SummarizerError
from redis_history.compaction.jobs import compaction_queue
from redis_history.compaction.run import choose_cut, run_compaction
from redis_history.compaction_policy import CompactionContext, CompactionPolicy
from redis_history.compaction_state import CompactionState
from redis_history.store.core import CompactionRequest
from redis_history.testing import FakeSummarizer


@pytest.fixture
def client(sync_client: Any) -> Any:
    """Compaction runs on every synchronous client a worker may hold, a cluster's included."""
    return sync_client


POLICY = CompactionPolicy(soft_tokens=50, hard_tokens=10_000, keep_last_turns=1, min_messages=2)


class Joiner:
    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        self.seen.append([m.id for m in messages])
        return "Previously: " + " / ".join(m.content for m in messages if m.role == "user")


def test_cut_is_at_a_turn_boundary_keeping_the_tail() -> None:
    """The cut lands on a user message and keeps the last N turns whole."""
    messages = turns(4)
    cut = choose_cut(messages, [10] * len(messages), POLICY)
    assert cut is not None
    assert (cut.head, cut.drop) == (1, 13)
    assert messages[cut.drop].role == "user"
    assert choose_cut(messages[:5], [10] * 5, POLICY) is None
    floor = CompactionPolicy(keep_last_turns=1, keep_last_tokens=85, min_messages=2)
    cut_with_floor = choose_cut(messages, [10] * len(messages), floor)
    assert cut_with_floor is not None
    assert cut_with_floor.drop == 5, "9 would keep only 80 tokens"


def test_compaction_replaces_the_prefix_and_keeps_the_system_prompt(client: Any) -> None:
    """The summary starts with the system prompt verbatim and records what it covers."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    messages = turns(4)
    history.append_many(messages)
    summarizer = Joiner()
    result = run_compaction(history, summarizer, POLICY)
    assert result.status == "compacted"
    assert result.dropped == 13
    live = history.snapshot()
    assert live[1:] == messages[13:]
    assert live[0].content.startswith("be helpful\n\nPreviously: q0 / q1 / q2")
    assert live[0].metadata["covers"] == [m.id for m in messages[1:13]]
    assert history.transcript() == messages
    assert history.compaction_state() == CompactionState.compacted_this_turn(POLICY.cooldown_turns)
    assert not client.exists(history.keys.lock)
    assert history.compaction_stats() == (1, result.tokens_freed)
    assert result.tokens_freed > 0


def test_a_held_lock_means_busy_and_nothing_written(client: Any) -> None:
    """With another worker holding the lock, the job reports busy and writes nothing."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    client.set(history.keys.lock, "someone-else", px=60_000)
    before = history.entries()
    assert run_compaction(history, Joiner(), POLICY).status == "busy"
    assert history.entries() == before


def test_too_little_history_exhausts(client: Any) -> None:
    """When no cut is worth making, the state becomes Exhausted and nothing is written."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(1))
    due = POLICY.model_copy(update={"soft_tokens": 1})
    assert run_compaction(history, Joiner(), due).status == "exhausted"
    assert history.compaction_state() == CompactionState.exhausted()
    assert len(history) == 5


def test_maybe_compact_enqueues_once_with_a_json_payload(client: Any) -> None:
    """Many calls enqueue one job whose payload is plain JSON and whose id has no colon."""
    history = RedisHistory(client, "user:1", token_counter="heuristic")
    history.append_many(turns(6))
    queue = compaction_queue(fakeredis.FakeRedis(), "redis-history")
    assert [history.maybe_compact(queue, POLICY) for _ in range(5)].count(True) == 1
    (job,) = queue.get_jobs()
    assert ":" not in job.id
    assert job.timeout == POLICY.job_timeout_seconds
    assert job.result_ttl == 60, "the small JSON result is kept a minute, for the metrics"
    assert job.kwargs["conversation_id"] == "user:1"
    assert job.kwargs["policy"]["soft_tokens"] == 50


def test_maybe_compact_hands_the_request_to_any_scheduler(client: Any) -> None:
    """Any callable schedules; one that fails (a plain rq.Queue is not callable) releases the
    claim, so the next call may schedule; the request is the conversation and the policy."""
    history = RedisHistory(client, "c", namespace="t", token_counter="heuristic")
    history.append_many(turns(6))
    with pytest.raises(TypeError):
        history.maybe_compact(Queue(connection=fakeredis.FakeRedis()), POLICY)  # type: ignore[arg-type]
    scheduled: list[CompactionRequest] = []
    assert history.maybe_compact(scheduled.append, POLICY)
    (request,) = scheduled
    assert request.payload() == {
        "namespace": "t",
        "conversation_id": "c",
        "prefix": "rh",
        "policy": POLICY.model_dump(mode="json"),
    }
    assert client.hget(history.keys.meta, "queued") == request.job_id.encode()


def test_maybe_compact_respects_thresholds_and_state(client: Any) -> None:
    """Below the soft threshold, or compacted this turn, nothing is enqueued."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(1))
    queue = compaction_queue(fakeredis.FakeRedis(), "q")
    assert not history.maybe_compact(
        queue, CompactionPolicy(soft_tokens=10_000, hard_tokens=20_000)
    )
    history.compaction_event("compacted", 1)
    assert not history.maybe_compact(queue, POLICY)
    assert queue.count == 0


@pytest.mark.parametrize("bad", [None, "", "   "])
def test_a_summarizer_without_text_fails_the_job_and_writes_nothing(
    client: Any, bad: object
) -> None:
    """A summary that is not text raises SummarizerError; nothing is written, the lock is freed."""

    class Broken:
        def summarize(
            self, messages: Sequence[Message], *, context: CompactionContext | None = None
        ) -> object:
            return bad

    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    with pytest.raises(SummarizerError, match="not summary text"):
        run_compaction(history, Broken(), POLICY)  # type: ignore[arg-type]
    assert history.entries() == before
    assert history.compaction_state() == CompactionState.ready()
    assert not client.exists(history.keys.lock)


def test_a_failing_summarizer_propagates_and_writes_nothing(client: Any) -> None:
    """The summarizer's own error reaches the caller; the conversation and state are untouched."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    summarizer = FakeSummarizer(error=SummarizerError("the model is down"))
    with pytest.raises(SummarizerError, match="down"):
        run_compaction(history, summarizer, POLICY)
    assert [m.id for m in summarizer.calls[0]] == [e.message.id for e in before[:13]]
    assert history.entries() == before
    assert history.compaction_state() == CompactionState.ready()
    assert not client.exists(history.keys.lock)


def test_a_job_that_is_no_longer_due_is_skipped(client: Any) -> None:
    """A duplicate or late job (below the threshold, or compacted this turn) changes nothing."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    summarizer = FakeSummarizer()
    below = POLICY.model_copy(update={"soft_tokens": 10_000, "hard_tokens": 20_000})
    assert run_compaction(history, summarizer, below).status == "skipped"
    assert run_compaction(history, summarizer, POLICY).status == "compacted"
    after = history.entries()
    assert run_compaction(history, summarizer, POLICY).status == "skipped"
    assert history.entries() == after
    assert history.compaction_state() == CompactionState.compacted_this_turn(POLICY.cooldown_turns)
    assert len(summarizer.calls) == 1
    assert not client.exists(history.keys.lock)


def test_an_exhausted_conversation_warns_once(
    client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Once compaction cannot help, maybe_compact enqueues nothing and warns exactly once."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(1))
    due = POLICY.model_copy(update={"soft_tokens": 1, "hard_tokens": 2})
    assert run_compaction(history, FakeSummarizer(), due).status == "exhausted"
    queue = compaction_queue(fakeredis.FakeRedis(), "q")
    with caplog.at_level("WARNING", logger="redis_history"):
        assert [history.maybe_compact(queue, due) for _ in range(3)] == [False] * 3
    (record,) = caplog.records
    assert "default/c is exhausted" in record.getMessage()
    assert history.compaction_state() == CompactionState.exhausted(warned=True)
    assert queue.count == 0


def test_the_policy_caps_the_archive(client: Any) -> None:
    """Compactions keep at most archive_max_messages archived originals, the newest."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    capped = POLICY.model_copy(update={"archive_max_messages": 10, "cooldown_turns": 0})
    history.append_many(turns(4))
    assert run_compaction(history, Joiner(), capped).status == "compacted"
    history.advance_turn()
    history.append_many(turns(3)[1:])
    assert run_compaction(history, Joiner(), capped).status == "compacted"
    assert client.llen(history.keys.archive) == 10
    live = {m.id for m in history.snapshot()}
    archived = [m for m in history.transcript() if m.id not in live]
    assert len(archived) == 10


@pytest.mark.real_redis
def test_a_lock_whose_reply_was_lost_is_still_taken(fault_proxy: FaultProxy) -> None:
    """redis-py re-sends the lock's SET NX after its reply was lost; the retry finds the key
    holding this worker's own token, so the compaction goes on instead of reporting busy."""
    client = redis.Redis(host=fault_proxy.host, port=fault_proxy.port)
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    fault_proxy.drop_reply(b"\r\nSET\r\n")  # the lock's SET (not a handshake's CLIENT SETINFO)
    assert run_compaction(history, Joiner(), POLICY).status == "compacted"
    assert fault_proxy.dropped == 1
    assert not client.exists(history.keys.lock)
    client.close()
