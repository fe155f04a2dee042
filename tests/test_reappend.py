"""A batch appended again after a rewrite: new once a rollback or a truncate removed all of its
messages, refused once they removed part of it, a replay otherwise (compacted, replaced, or
other batches rolled back meanwhile).

Run against every backend (see ``backends.py``), the in-memory reference included; the lost
reply of such an append is in ``test_retries.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from samples import turns

from redis_history import Message, StaleSnapshotError, ToolCall


def state(history: Any) -> tuple[Any, ...]:
    return (history.entries(), history.token_estimate(), history.transcript(), history.len())


def tool_turn(n: int) -> list[Message]:
    """A user question, an assistant's tool call, its result and the answer."""
    return [
        Message.user(f"question {n}"),
        Message.assistant("", tool_calls=[ToolCall(id=f"call-{n}", name="search")]),
        Message.tool(f"result {n}", tool_call_id=f"call-{n}"),
        Message.assistant(f"answer {n}"),
    ]


def in_pieces(history: Any, turn: list[Message]) -> None:
    """The turn as an agent loop appends it: the question, the call with its result, the
    answer."""
    history.append(turn[0])
    history.append_many(turn[1:3])
    history.append(turn[3])


def at_once(history: Any, turn: list[Message]) -> None:
    history.append_many(turn)


APPENDS: dict[str, Callable[[Any, list[Message]], None]] = {
    "in pieces": in_pieces,
    "at once": at_once,
}


def test_a_rolled_back_batch_appended_again_lands(history: Any) -> None:
    """The guide's retry of a failed turn: the same message objects, appended again after
    their rollback, are stored; a repeat of that append is then a replay."""
    history.append_many(turns(1))
    before = history.snapshot()
    mine = [Message.user("and in Porto?"), Message.assistant("a reply that failed a check")]
    history.append_many(mine)
    assert history.rollback(mine) == 2
    history.append_many(mine)
    assert history.snapshot() == before + mine
    history.append_many(mine)
    assert history.snapshot() == before + mine
    assert history.rollback(mine) == 2  # and again
    history.append_many(mine)
    assert history.snapshot() == before + mine


def test_a_rolled_back_message_appended_again_lands(history: Any) -> None:
    """One message appended alone is a batch too."""
    history.append_many(turns(1))
    before = history.snapshot()
    question = Message.user("and in Porto?")
    history.append(question)
    history.rollback([question.id])
    history.append(question)
    assert history.snapshot() == [*before, question]


@pytest.mark.parametrize("first", list(APPENDS))
@pytest.mark.parametrize("again", list(APPENDS))
def test_a_turn_rolled_back_as_one_is_appended_again_whole(
    history: Any, first: str, again: str
) -> None:
    """A turn appended in several appends (or one) and rolled back as one call lands whole
    when appended again, in the same pieces or in others."""
    history.append_many(turns(1))
    before = history.snapshot()
    turn = tool_turn(1)
    APPENDS[first](history, turn)
    assert history.rollback(turn) == 4
    APPENDS[again](history, turn)
    assert history.snapshot() == before + turn
    APPENDS[again](history, turn)  # a repeat is a replay
    assert history.snapshot() == before + turn


def test_a_turn_rolled_back_in_two_steps_is_appended_again_whole(history: Any) -> None:
    """Removing a batch's messages over two rollbacks makes it new again as one would."""
    history.append_many(turns(1))
    before = history.snapshot()
    turn = tool_turn(1)
    history.append_many(turn)
    history.rollback(turn[2:], reopen_calls=True)
    history.rollback(turn[:2])
    history.append_many(turn)
    assert history.snapshot() == before + turn


def test_a_replay_stays_a_replay_when_other_batches_were_rolled_back(history: Any) -> None:
    """A batch applied and never removed is still a replay, written nothing, after batches
    before and after it were rolled back, one of them in two steps, and appended again."""
    history.append(Message.system("be brief"))
    first = [Message.user("question 0"), Message.assistant("answer 0")]
    mine, theirs = tool_turn(1), tool_turn(2)
    for batch in (first, mine, theirs):
        history.append_many(batch)
    history.rollback(first)
    history.rollback(theirs[3:])
    settled = state(history)
    history.append_many(mine)
    assert state(history) == settled
    history.rollback(theirs[:3])
    settled = state(history)
    history.append_many(mine)
    assert state(history) == settled
    history.append_many(theirs)
    history.append_many(mine)
    assert history.snapshot()[1:] == mine + theirs


def test_a_partly_rolled_back_batch_is_refused_whole(history: Any) -> None:
    """A batch a rollback removed part of is not appended again over what it left (that
    would repeat those messages): StaleSnapshotError, nothing written. Its removed messages
    appended alone land; once the rest is rolled back too, the whole batch lands again."""
    history.append_many(turns(1))
    before = history.snapshot()
    turn = tool_turn(1)
    history.append_many(turn)
    assert history.rollback(turn[2:], reopen_calls=True) == 2
    after = state(history)
    with pytest.raises(StaleSnapshotError, match="removed part of this batch"):
        history.append_many(turn)
    assert state(history) == after
    history.append_many(turn[2:])
    assert history.snapshot() == before + turn
    history.rollback(turn)
    history.append_many(turn)
    assert history.snapshot() == before + turn


@pytest.mark.parametrize("first", list(APPENDS))
def test_truncate_makes_what_it_removes_appendable_again(history: Any, first: str) -> None:
    """truncate removes messages as a rollback does: the batches it removes whole land when
    appended again, one it cuts is refused, and truncate(0) makes every live batch new."""
    history.append_many(turns(1))
    before = history.snapshot()
    turn = tool_turn(1)
    APPENDS[first](history, turn)
    history.truncate(len(before))
    APPENDS[first](history, turn)
    assert history.snapshot() == before + turn
    history.truncate(len(before) + 3)  # cuts the answer off the turn
    if first == "at once":
        with pytest.raises(StaleSnapshotError, match="removed part of this batch"):
            history.append_many(turn)
    history.append(turn[3])
    assert history.snapshot() == before + turn
    history.truncate(0)
    history.append_many(before)
    APPENDS[first](history, turn)
    assert history.snapshot() == before + turn


def test_compacted_or_replaced_batches_stay_applied(history: Any) -> None:
    """A splice (compaction) or a replace takes messages out of the list without undoing
    their append: the batch appended again is a replay, written nothing."""
    first, second = tool_turn(1), tool_turn(2)
    history.append_many(first)
    history.append_many(second)
    history.splice_prefix(4, Message.system("summary of the first turn"))
    compacted = state(history)
    history.append_many(first)
    assert state(history) == compacted
    history.append_many(second)
    assert state(history) == compacted
    fresh = Message.user("a fresh start")
    history.replace([fresh])
    replaced = state(history)
    history.append_many(second)
    history.append_many(first)
    assert state(history) == replaced
    history.rollback([fresh])  # removes what the replace wrote, not those batches
    emptied = state(history)
    history.append_many(second)
    assert state(history) == emptied


def test_a_cut_batch_compacted_stays_refused(history: Any) -> None:
    """A batch cut by a rollback and then compacted is still refused: its rest is in the
    conversation's record."""
    turn = tool_turn(1)
    history.append_many(turn)
    history.rollback(turn[3:])
    history.append_many(tool_turn(2)[3:])
    history.splice_prefix(3, Message.system("summary"))
    settled = state(history)
    with pytest.raises(StaleSnapshotError, match="removed part of this batch"):
        history.append_many(turn)
    assert state(history) == settled


def test_a_batch_compacted_in_part_stays_applied(history: Any) -> None:
    """A batch a splice took part of stays applied, even once its rest is rolled back; the
    batch right after the spliced prefix is still tracked whole."""
    first = turns(1)[1:3]  # a question and its tool call
    straddling = [Message.tool("r0", tool_call_id="c0"), Message.assistant("answer 0")]
    history.append_many(first)
    history.append_many(straddling)
    after = [Message.user("question 2"), Message.assistant("answer 2")]
    history.append_many(after)
    history.splice_prefix(3, Message.system("summary"))
    history.rollback(straddling[1:])
    history.rollback(after[1:])
    settled = state(history)
    history.append_many(straddling)
    assert state(history) == settled
    with pytest.raises(StaleSnapshotError, match="removed part of this batch"):
        history.append_many(after)
    assert state(history) == settled
