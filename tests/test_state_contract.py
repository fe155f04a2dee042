"""The History protocol, and the compaction-state half of the contract, on every backend
(in memory, fakeredis, real Redis, asyncio, cluster; see ``backends.py``)."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
from samples import turns

from redis_history import (
    CompactionPolicy,
    CompactionRequest,
    CompactionState,
    History,
    InvalidTransitionError,
    RedisHistory,
)
from redis_history.testing import InMemoryHistory

DUE = CompactionPolicy(soft_tokens=1, hard_tokens=10_000)


def test_the_sync_backends_satisfy_the_history_protocol() -> None:
    """RedisHistory and InMemoryHistory are Histories (mypy checks the signatures here too)."""
    backends: list[History] = [RedisHistory(fakeredis.FakeRedis(), "c"), InMemoryHistory("c")]
    assert all(isinstance(backend, History) for backend in backends)


def test_the_state_moves_through_turns_and_counts_compactions(history: Any) -> None:
    """Ready -> CompactedThisTurn -> Cooling -> Ready, with the compaction counted."""
    history.append_many(turns(1))
    assert history.compaction_state() == CompactionState.ready()
    assert history.compaction_event("compacted", 2, 500) == CompactionState.compacted_this_turn(2)
    assert history.advance_turn() == CompactionState.cooling(2)
    assert history.advance_turn() == CompactionState.cooling(1)
    assert history.advance_turn() == CompactionState.ready()
    assert history.compaction_stats() == (1, 500)
    assert history.compaction_status() == (history.token_estimate(), CompactionState.ready())


def test_a_refused_event_changes_nothing(history: Any) -> None:
    """Exhausting while cooling is refused, and the state stays."""
    history.append_many(turns(1))
    history.compaction_event("compacted", 2)
    history.advance_turn()
    with pytest.raises(InvalidTransitionError):
        history.compaction_event("exhausted")
    assert history.compaction_state() == CompactionState.cooling(2)


def test_an_event_repeated_with_its_op_id_is_applied_once(history: Any) -> None:
    """advance_turn repeated with the same op_id returns the first state and skips no turn."""
    history.append_many(turns(1))
    history.compaction_event("compacted", 3)
    assert history.advance_turn(op_id="turn-7") == CompactionState.cooling(3)
    assert history.advance_turn(op_id="turn-7") == CompactionState.cooling(3)
    assert history.compaction_state() == CompactionState.cooling(3)


def test_events_on_a_conversation_that_does_not_exist_change_nothing(history: Any) -> None:
    """A new (or deleted) conversation stays Ready and empty whatever events arrive."""
    history.compaction_event("compacted", 2, 100)
    history.advance_turn()
    assert history.compaction_state() == CompactionState.ready()
    assert history.compaction_stats() == (0, 0)
    assert history.is_empty()


def test_maybe_compact_schedules_once_until_the_claim_is_released(history: Any) -> None:
    """Of many calls one schedules; releasing its claim lets the next one schedule again."""
    history.append_many(turns(2))
    scheduled: list[CompactionRequest] = []
    assert [history.maybe_compact(scheduled.append, DUE) for _ in range(4)].count(True) == 1
    (request,) = scheduled
    assert request.conversation_id == history.conversation_id
    assert request.policy == DUE
    assert not history.release_compaction_claim("another-job")
    assert history.release_compaction_claim(request.job_id)
    assert history.maybe_compact(scheduled.append, DUE)
    assert len(scheduled) == 2


def test_a_failing_scheduler_releases_the_claim(history: Any) -> None:
    """If scheduling raises, the error reaches the caller and the claim is released."""
    history.append_many(turns(2))

    def down(request: CompactionRequest) -> None:
        raise RuntimeError("queue down")

    with pytest.raises(RuntimeError, match="queue down"):
        history.maybe_compact(down, DUE)
    scheduled: list[CompactionRequest] = []
    assert history.maybe_compact(scheduled.append, DUE)


def test_an_interrupted_scheduler_releases_the_claim(history: Any) -> None:
    """An interrupt while scheduling (not an ``Exception``) reaches the caller, and the claim
    is released as for an error."""
    history.append_many(turns(2))

    def interrupted(request: CompactionRequest) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        history.maybe_compact(interrupted, DUE)
    scheduled: list[CompactionRequest] = []
    assert history.maybe_compact(scheduled.append, DUE)


def test_maybe_compact_respects_the_thresholds_and_the_state(history: Any) -> None:
    """Below the soft limit, or compacted this turn, nothing is scheduled."""
    history.append_many(turns(1))
    scheduled: list[CompactionRequest] = []
    assert not history.maybe_compact(scheduled.append, CompactionPolicy(soft_tokens=10_000))
    history.compaction_event("compacted", 1)
    assert not history.maybe_compact(scheduled.append, DUE)
    assert scheduled == []


def test_an_exhausted_conversation_warns_once(
    history: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Exhausted: nothing is scheduled, and of many calls exactly one logs the warning."""
    history.append_many(turns(1))
    history.compaction_event("exhausted")
    scheduled: list[CompactionRequest] = []
    with caplog.at_level("WARNING", logger="redis_history"):
        assert not any(history.maybe_compact(scheduled.append, DUE) for _ in range(3))
    (record,) = caplog.records
    assert "is exhausted" in record.getMessage()
    assert history.compaction_state() == CompactionState.exhausted(warned=True)
    assert scheduled == []
