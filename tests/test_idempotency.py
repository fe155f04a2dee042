"""Every write is applied once when it is repeated: by message ids for appends and splices,
by ``op_id`` for the rest. Run against every backend (see ``backends.py``).

The faults that make a client repeat a write by itself (a reply lost after the server
applied it) are injected on real servers in ``test_retries.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from samples import turns

from redis_history import Message, RoleOrderError, ToolCall
from redis_history.store.core import APPENDS_DROPPED, OPS_KEPT


def state(history: Any) -> tuple[Any, ...]:
    return (history.entries(), history.token_estimate(), history.transcript(), history.len())


def test_a_repeated_append_is_stored_once_and_not_refused(history: Any) -> None:
    """Appending a message that was already appended is a no-op, not a duplicate or an error."""
    question = Message.user("q")
    history.append(question)
    history.append(question)
    answer = [
        Message.assistant("", tool_calls=[ToolCall(id="c1", name="f")]),
        Message.tool("r", tool_call_id="c1"),
        Message.assistant("a"),
    ]
    history.append_many(answer)
    after = state(history)
    history.append_many(answer)
    history.append(question)
    assert state(history) == after
    assert history.snapshot() == [question, *answer]


def test_a_different_message_is_still_checked(history: Any) -> None:
    """Only the same batch is recognised: a new message in the wrong place is refused."""
    history.append(Message.user("q"))
    with pytest.raises(RoleOrderError):
        history.append(Message.user("another q"))


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda h, op: h.truncate(5, op_id=op), id="truncate"),
        pytest.param(lambda h, op: h.replace(turns(1), op_id=op), id="replace"),
        pytest.param(lambda h, op: h.record_input_tokens(777, op_id=op), id="record"),
        pytest.param(lambda h, op: h.splice_prefix(5, Message.system("s"), op_id=op), id="splice"),
        pytest.param(
            lambda h, op: h.rollback([m.id for m in h.snapshot()[-4:]], op_id=op), id="rollback"
        ),
    ],
)
def test_a_write_repeated_with_its_op_id_is_applied_once(history: Any, write: Any) -> None:
    """Repeating a write with the same op_id returns the first result and changes nothing,
    also after other writes; a new op_id applies it again."""
    history.append_many(turns(3))
    first = write(history, "op-1")
    after = state(history)
    history.append(Message.user("meanwhile"))
    moved = state(history)
    assert write(history, "op-1") == first
    assert state(history) == moved
    assert after != moved


def test_an_op_id_must_be_a_non_empty_string(history: Any) -> None:
    """op_id="" is a ValueError."""
    with pytest.raises(ValueError, match="op_id"):
        history.truncate(0, op_id="")


def test_a_splice_repeated_with_the_same_summary_is_applied_once(history: Any) -> None:
    """The summary message's id names the splice: repeating it drops nothing more."""
    history.append_many(turns(3))
    summary = Message.system("summary")
    assert history.splice_prefix(5, summary) == 5
    after = state(history)
    assert history.splice_prefix(5, summary) == 5
    assert state(history) == after


def test_the_conversation_remembers_the_last_ops_kept_writes(history: Any) -> None:
    """A write is recognised while fewer than OPS_KEPT others came after it; later it is new."""
    history.append_many([*turns(1), Message.user("u"), Message.assistant("b")])
    assert history.truncate(6, op_id="old") == 1
    for i in range(OPS_KEPT - 1):
        history.record_input_tokens(i)
    assert history.truncate(5, op_id="old") == 1  # still remembered: nothing removed
    assert history.len() == 6
    history.record_input_tokens(0)
    assert history.truncate(5, op_id="old") == 1  # forgotten: applied as a new write
    assert history.len() == 5


def test_appends_are_remembered_apart_from_other_writes(history: Any) -> None:
    """An append is recognised while fewer than OPS_KEPT other appends came after it, however
    many other writes did, and forgotten by the OPS_KEPT + APPENDS_DROPPED - 1th: the
    oldest APPENDS_DROPPED appends are forgotten at once."""
    first = Message.user("first")
    history.append(first)
    for i in range(OPS_KEPT + 5):
        history.record_input_tokens(i)
    for i in range(OPS_KEPT + APPENDS_DROPPED - 2):
        history.append(Message.assistant(f"a{i}") if i % 2 == 0 else Message.user(f"u{i}"))
    length = history.len()
    history.append(first)  # still remembered
    assert history.len() == length
    history.append(Message.assistant("last"))
    history.append(first)  # forgotten: a new append
    assert history.len() == length + 2
    assert history.snapshot()[-1] == first


def test_ids_that_join_alike_are_different_writes(history: Any) -> None:
    """An append whose one id is another batch's ids joined by NUL is a new write, stored."""
    history.append_many([Message.user("q", id="a"), Message.assistant("r", id="b")])
    different = Message.user("DIFFERENT", id="a\x00b")
    history.append(different)
    assert history.snapshot()[-1] == different


def test_a_second_splice_reusing_a_summary_id_is_a_new_write(history: Any) -> None:
    """A splice whose summary reuses the id of an earlier splice's summary, over as many
    messages, is applied, not answered as a repeat of the first."""
    later = [
        Message.user("u2"),
        Message.assistant("b2"),
        Message.user("u3"),
        Message.assistant("b3"),
    ]
    history.append_many([*turns(1), *later])
    assert history.splice_prefix(5, Message.system("first", id="s")) == 5
    second = Message.system("second", id="s")
    assert history.splice_prefix(5, second) == 5
    assert history.snapshot() == [second]
    assert [m.content for m in history.transcript()] == [m.content for m in [*turns(1), *later]]
