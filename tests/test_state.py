"""The compaction state machine: each transition of the seed map, and those that must not happen."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from redis_history import Message, RedisHistory
from redis_history.compaction_state import CompactionState
from redis_history.errors import CorruptHistoryError, InvalidTransitionError

READY = CompactionState.ready()
STATES = [
    READY,
    CompactionState.compacted_this_turn(0),
    CompactionState.compacted_this_turn(2),
    CompactionState.cooling(0),
    CompactionState.cooling(1),
    CompactionState.cooling(3),
    CompactionState.exhausted(),
    CompactionState.exhausted(warned=True),
]
EVENTS = [("advance_turn", 0), ("compacted", 0), ("compacted", 2), ("exhausted", 0), ("warned", 0)]


@pytest.mark.parametrize(
    ("state", "after"),
    [
        (READY, READY),
        (CompactionState.compacted_this_turn(0), READY),
        (CompactionState.compacted_this_turn(2), CompactionState.cooling(2)),
        (CompactionState.cooling(3), CompactionState.cooling(2)),
        (CompactionState.cooling(1), READY),
        (CompactionState.exhausted(), CompactionState.exhausted()),
        (CompactionState.exhausted(warned=True), CompactionState.exhausted(warned=True)),
    ],
    ids=str,
)
def test_advance_turn(state: CompactionState, after: CompactionState) -> None:
    """A turn boundary cools down, counts down, or leaves the state alone."""
    assert state.advance_turn() == after


def test_a_compaction_starts_a_cooldown_from_ready_cooling_or_exhausted() -> None:
    """compacted is allowed from Ready, (hard limit) Cooling and Exhausted (tried again once
    grown), never twice a turn."""
    state = READY.on_compacted(2)
    assert state.is_compacted_this_turn()
    assert state.cooldown_remaining() == 2
    assert CompactionState.cooling(1).on_compacted(3) == CompactionState.compacted_this_turn(3)
    for warned in (False, True):
        exhausted = CompactionState.exhausted(warned=warned)
        assert exhausted.on_compacted(1) == CompactionState.compacted_this_turn(1)
    for refused in STATES:
        if refused.kind == "compacted":
            with pytest.raises(InvalidTransitionError):
                refused.on_compacted(1)


def test_exhausted_is_not_reachable_from_cooling() -> None:
    """Exhaustion comes from Ready or CompactedThisTurn, never from Cooling."""
    assert READY.on_exhausted() == CompactionState.exhausted()
    assert CompactionState.compacted_this_turn(1).on_exhausted().is_exhausted()
    with pytest.raises(InvalidTransitionError):
        CompactionState.cooling(2).on_exhausted()


def test_the_warning_is_given_once_and_only_a_compaction_leaves_exhausted() -> None:
    """Exhausted{false} becomes Exhausted{true} once; no event but a compaction (tried again
    once the conversation grew) leaves it, and none warns again."""
    warned = CompactionState.exhausted().on_warned()
    assert warned.warned
    with pytest.raises(InvalidTransitionError):
        warned.on_warned()
    assert warned.advance_turn() == warned
    assert warned.on_exhausted() == warned
    assert warned.on_compacted(0) == CompactionState.compacted_this_turn(0)
    with pytest.raises(InvalidTransitionError):
        READY.on_warned()


def test_encoding_round_trips_and_refuses_garbage() -> None:
    """The meta-hash form decodes to the same state; anything else is an error."""
    for state in STATES:
        assert CompactionState.decode(state.encode()) == state
    assert CompactionState.decode(None) == READY
    with pytest.raises(ValueError, match="not a compaction state"):
        CompactionState.decode("sleepy:1")


@pytest.fixture
def client(sync_client: Any) -> Any:
    """The stored state on every synchronous client, a cluster's included."""
    return sync_client


def test_the_script_implements_the_same_map(client: Any) -> None:
    """For every state and event, the Lua script and the pure type agree (or both refuse)."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    for state, (event, value) in itertools.product(STATES, EVENTS):
        client.hset(history.keys.meta, "cstate", state.encode())
        try:
            expected: object = state.apply(event, value)  # type: ignore[arg-type]
        except InvalidTransitionError:
            expected = InvalidTransitionError
        try:
            got: object = history.execute(history.core.compaction_event(event, value))  # type: ignore[arg-type]
        except InvalidTransitionError:
            got = InvalidTransitionError
        assert got == expected, (state, event, value)
        if expected is InvalidTransitionError:
            assert CompactionState.decode(client.hget(history.keys.meta, "cstate")) == state


def test_history_reads_and_advances_the_stored_state(client: Any) -> None:
    """compaction_state() starts Ready; advance_turn() applies the map in Redis."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    assert history.compaction_state() == READY
    history.append(Message.user("hello"))
    history.execute(history.core.compaction_event("compacted", 1, 500))
    assert history.compaction_state().is_compacted_this_turn()
    assert history.advance_turn() == CompactionState.cooling(1)
    assert history.advance_turn() == READY
    assert client.hget(history.keys.meta, "tokens_freed") == b"500"


def test_a_corrupt_stored_state_is_reported(client: Any) -> None:
    """A cstate field we did not write raises CorruptHistoryError."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    client.hset(history.keys.meta, "cstate", "weird")
    with pytest.raises(CorruptHistoryError):
        history.compaction_state()
    with pytest.raises(CorruptHistoryError, match="cstate"):
        history.compaction_status()


def test_status_reads_the_estimate_and_the_state_together(client: Any) -> None:
    """compaction_status equals token_estimate and compaction_state read apart."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    assert history.compaction_status() == (None, READY)
    history.append(Message.user("hello there"))
    history.record_input_tokens(40)
    history.compaction_event("compacted", 2)
    assert history.compaction_status() == (history.token_estimate(), history.compaction_state())
    assert history.compaction_status() == (40, CompactionState.compacted_this_turn(2))
