"""The History contract, run against every backend (see ``backends.py``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from redis_history import (
    HistoryError,
    Message,
    MessageTooLargeError,
    RoleOrderError,
    StaleSnapshotError,
    ToolCall,
    ToolPairingError,
)
from redis_history.tokens import message_tokens


def call(id_: str, name: str = "search", **arguments: Any) -> ToolCall:
    return ToolCall(id=id_, name=name, arguments=arguments)


def state(history: Any) -> tuple[Any, ...]:
    """Everything observable about a history, to check that a refused write changed nothing."""
    return (history.entries(), history.token_estimate(), history.transcript(), history.len())


def turn(n: int) -> list[Message]:
    return [Message.user(f"question {n}"), Message.assistant(f"answer {n}")]


def test_append_round_trips_every_field(history: Any) -> None:
    """A message comes back from snapshot equal to what was appended, tool calls and all."""
    messages = [
        Message.system("be brief", metadata={"v": 2}),
        Message.user("hi", name="ann", created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        Message.assistant("", tool_calls=[call("c1", q="x", n=[1, 2]), call("c2", "fetch")]),
        Message.tool("r2", tool_call_id="c2"),
        Message.tool("r1", tool_call_id="c1", metadata={"ok": True, "nested": {"a": None}}),
        Message.assistant("done ✓ 日本語"),
    ]
    for message in messages:
        history.append(message)
    assert history.snapshot() == messages
    assert len(history) == history.len() == 6
    assert not history.is_empty()


def test_new_history_is_empty(history: Any) -> None:
    """An unknown conversation is empty, with no estimate."""
    assert history.is_empty()
    assert history.snapshot() == []
    assert history.token_estimate() is None
    assert history.transcript() == []


def test_conversations_are_independent(make_history: Any) -> None:
    """Two conversation ids never see each other's messages."""
    a, b = make_history("a"), make_history("b")
    a.append(Message.user("for a"))
    assert b.is_empty()
    b.append(Message.system("b starts with a system prompt"))
    assert [m.content for m in a.snapshot()] == ["for a"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Message.user("u"), Message.system("late system")),
        (Message.user("u"), Message.user("user twice")),
        (Message.system("s"), Message.assistant("assistant after system")),
    ],
    ids=["system-not-first", "user-after-user", "assistant-after-system"],
)
def test_role_order_is_enforced(history: Any, first: Message, second: Message) -> None:
    """A role that may not follow the last one is refused and nothing is written."""
    history.append(first)
    before = state(history)
    with pytest.raises(RoleOrderError) as info:
        history.append(second)
    assert info.value.conversation_id == "conv"
    assert state(history) == before


def test_assistant_may_not_open_a_conversation(history: Any) -> None:
    """An assistant message with nothing before it is refused."""
    with pytest.raises(RoleOrderError):
        history.append(Message.assistant("hello?"))
    assert history.is_empty()


def test_tool_result_must_answer_an_open_call(history: Any) -> None:
    """Orphan tool results and double answers are refused; answers may come in any order."""
    history.append(Message.user("u"))
    with pytest.raises(ToolPairingError):
        history.append(Message.tool("orphan", tool_call_id="nope"))
    history.append(Message.assistant("", tool_calls=[call("a"), call("b")]))
    history.append(Message.tool("b done", tool_call_id="b"))
    before = state(history)
    with pytest.raises(ToolPairingError):
        history.append(Message.tool("b again", tool_call_id="b"))
    with pytest.raises(ToolPairingError):
        history.append(Message.user("while a is open"))
    with pytest.raises(ToolPairingError):
        history.append(Message.assistant("while a is open"))
    assert state(history) == before
    history.append(Message.tool("a done", tool_call_id="a"))
    history.append(Message.assistant("all answered"))
    history.append(Message.user("next"))


def test_tool_may_only_answer_the_latest_assistant(history: Any) -> None:
    """Calls of an earlier assistant message cannot be answered after a newer one."""
    history.append_many([Message.user("u"), Message.assistant("", tool_calls=[call("old")])])
    history.append(Message.tool("ok", tool_call_id="old"))
    history.append(Message.assistant("", tool_calls=[call("new")]))
    with pytest.raises(ToolPairingError):
        history.append(Message.tool("late", tool_call_id="old"))


def test_append_many_checks_the_batch_as_a_whole(history: Any) -> None:
    """A tool call and its result may arrive together; a bad batch writes none of itself."""
    history.append(Message.user("u"))
    history.append_many(
        [Message.assistant("", tool_calls=[call("c1")]), Message.tool("r", tool_call_id="c1")]
    )
    before = state(history)
    bad = [Message.assistant("ok"), Message.user("fine"), Message.user("second user")]
    with pytest.raises(RoleOrderError) as info:
        history.append_many(bad)
    assert info.value.index == 2
    assert state(history) == before


def test_validate_false_accepts_any_order(make_history: Any) -> None:
    """With validation off, a store takes messages in any order."""
    history = make_history(validate=False)
    messages = [
        Message.assistant("first"),
        Message.tool("orphan", tool_call_id="x"),
        Message.system("late"),
    ]
    history.append_many(messages)
    assert history.snapshot() == messages


def test_oversized_message_is_refused(make_history: Any) -> None:
    """A message over max_message_bytes raises and nothing is written."""
    history = make_history(max_message_bytes=2000)
    history.append(Message.user("small"))
    before = state(history)
    with pytest.raises(MessageTooLargeError) as info:
        history.append_many([Message.assistant("fine"), Message.user("x" * 5000)])
    assert info.value.index == 1
    assert state(history) == before


def test_replace_validates_from_an_empty_start(history: Any) -> None:
    """replace swaps every message, checking the new list on its own."""
    history.append_many(turn(1))
    history.replace([Message.system("s"), *turn(2)])
    assert [m.content for m in history.snapshot()] == ["s", "question 2", "answer 2"]
    before = state(history)
    with pytest.raises(RoleOrderError):
        history.replace([Message.assistant("cannot open")])
    assert state(history) == before
    history.replace([])
    assert history.is_empty()


def test_splice_prefix_keeps_the_tail_and_archives_the_prefix(history: Any) -> None:
    """The first N messages become the summary; later ones stay; originals go to the archive."""
    messages = [*turn(1), *turn(2), *turn(3)]
    history.append_many(messages)
    summary = Message.system("Previously: turns 1 and 2")
    assert history.splice_prefix(4, summary) == 4
    assert history.snapshot() == [summary, *messages[4:]]
    assert history.transcript() == messages
    history.append(Message.user("after the splice"))
    assert history.len() == 4


def test_splice_prefix_clamps_to_the_length(history: Any) -> None:
    """Dropping more than exists drops everything and returns the real count."""
    history.append_many(turn(1))
    assert history.splice_prefix(10, Message.user("summary")) == 2
    assert [m.content for m in history.snapshot()] == ["summary"]
    history.append(Message.assistant("the state follows the summary"))


def test_splice_prefix_on_an_empty_history_writes_nothing(history: Any) -> None:
    """Splicing an empty history returns 0 and leaves it empty."""
    assert history.splice_prefix(3, Message.user("summary")) == 0
    assert history.is_empty()


def test_splice_prefix_refuses_a_stale_prefix(history: Any) -> None:
    """If the prefix is no longer the summarized ids, nothing is written."""
    messages = [*turn(1), *turn(2)]
    history.append_many(messages)
    ids = [m.id for m in messages[:2]]
    history.truncate(1)
    history.append(Message.assistant("different"))
    before = state(history)
    with pytest.raises(StaleSnapshotError):
        history.splice_prefix(2, Message.user("summary"), expected_ids=ids)
    assert state(history) == before
    fresh = [m.id for m in history.snapshot()]
    assert history.splice_prefix(2, Message.user("s"), expected_ids=fresh) == 2


def test_splice_prefix_refuses_when_fewer_messages_than_summarized(history: Any) -> None:
    """expected_ids longer than the history is stale, not clamped."""
    history.append_many(turn(1))
    ids = [m.id for m in history.snapshot()]
    history.truncate(1)
    with pytest.raises(StaleSnapshotError):
        history.splice_prefix(2, Message.user("s"), expected_ids=ids)
    assert history.len() == 1


def test_splice_prefix_rejects_inconsistent_arguments(history: Any) -> None:
    """Negative counts, no summary, or ids of the wrong length are ValueErrors."""
    history.append_many(turn(1))
    with pytest.raises(ValueError, match="drop_count"):
        history.splice_prefix(-1, Message.user("s"))
    with pytest.raises(ValueError, match="summary"):
        history.splice_prefix(1, [])
    with pytest.raises(ValueError, match="expected_ids"):
        history.splice_prefix(2, Message.user("s"), expected_ids=["only-one"])
    assert history.len() == 2


def test_truncate_rolls_back_and_rebuilds_role_state(history: Any) -> None:
    """After truncate the role and tool-pairing rules follow the new tail; a cut between a
    tool call and its results is refused, writing nothing."""
    history.append_many(
        [
            Message.user("u"),
            Message.assistant("", tool_calls=[call("c1"), call("c2")]),
            Message.tool("r1", tool_call_id="c1"),
            Message.tool("r2", tool_call_id="c2"),
            Message.assistant("done"),
        ]
    )
    before = history.entries()
    for keep in (2, 3):
        with pytest.raises(ToolPairingError, match="would part tool call"):
            history.truncate(keep)
    assert history.entries() == before
    assert history.truncate(4) == 1
    with pytest.raises(ToolPairingError):
        history.append(Message.tool("c2 was answered", tool_call_id="c2"))
    history.append(Message.assistant("done again"))
    assert history.truncate(1) == 4
    history.append(Message.assistant("after the user"))
    assert history.truncate(0) == 2
    assert history.is_empty()
    history.append(Message.system("a fresh start"))


def test_truncate_beyond_the_length_is_a_no_op(history: Any) -> None:
    """truncate(n >= len) changes nothing, baseline included."""
    history.append_many(turn(1))
    history.record_input_tokens(500)
    before = state(history)
    assert history.truncate(2) == 0
    assert history.truncate(99) == 0
    assert state(history) == before
    with pytest.raises(ValueError, match=">= 0"):
        history.truncate(-1)


def test_token_estimate_follows_the_seed_rules(history: Any) -> None:
    """No baseline: the stored total; baseline: it plus what came after; resets on rewrites."""
    counter = history.token_counter
    first = turn(1)
    history.append_many(first)
    total = sum(message_tokens(m, counter) for m in first)
    assert history.token_estimate() == total
    history.record_input_tokens(1000)
    assert history.token_estimate() == 1000
    extra = Message.user("more")
    history.append(extra)
    assert history.token_estimate() == 1000 + message_tokens(extra, counter)
    history.truncate(2)
    assert history.token_estimate() == total
    history.record_input_tokens(7)
    summary = Message.user("sum")
    history.splice_prefix(1, summary)
    assert history.token_estimate() == total - message_tokens(first[0], counter) + (
        message_tokens(summary, counter)
    )
    history.record_input_tokens(7)
    history.replace(first)
    assert history.token_estimate() == total


def test_entries_carry_token_counts_and_flags(history: Any) -> None:
    """Each stored message records its count, exactness, and whether it is a summary."""
    history.append_many(turn(1))
    history.splice_prefix(1, Message.user("summary"))
    entries = history.entries()
    assert [e.summary for e in entries] == [True, False]
    assert all(e.exact == history.token_counter.exact for e in entries)
    assert [e.tokens for e in entries] == [
        message_tokens(e.message, history.token_counter) for e in entries
    ]


def test_heuristic_counts_are_never_exact(make_history: Any) -> None:
    """With the heuristic counter, stored counts are marked inexact."""
    history = make_history(token_counter="heuristic")
    history.append(Message.user("hello there"))
    (entry,) = history.entries()
    assert not entry.exact


def test_tail_and_range_read_part_of_the_list(history: Any) -> None:
    """tail and range return the same as slicing the snapshot."""
    messages = [m for n in range(5) for m in turn(n)]
    history.append_many(messages)
    assert history.tail(3) == messages[-3:]
    assert history.tail(0) == []
    assert history.tail(50) == messages
    for start, stop in [(0, None), (2, 5), (-4, None), (3, -2), (0, 0), (8, 3), (-100, 2)]:
        assert history.range(start, stop) == messages[start:stop]
    with pytest.raises(ValueError, match=">= 0"):
        history.tail(-1)


def test_delete_removes_the_conversation(history: Any) -> None:
    """delete forgets messages, archive and baseline; it reports whether anything existed."""
    history.append_many(turn(1))
    history.splice_prefix(1, Message.user("s"))
    history.record_input_tokens(3)
    assert history.delete()
    assert not history.delete()
    assert history.is_empty()
    assert history.transcript() == []
    assert history.token_estimate() is None
    history.append(Message.user("starts over"))


@pytest.mark.parametrize(
    "bad_id", ["", "a{b}", "tab\there", "x" * 201], ids=["empty", "braces", "control", "long"]
)
def test_bad_conversation_ids_are_value_errors(make_history: Any, bad_id: str) -> None:
    """Conversation ids that cannot be a key are refused before any I/O."""
    with pytest.raises(ValueError, match="conversation id"):
        make_history(bad_id)


def test_errors_share_one_root(history: Any) -> None:
    """Every refusal is a HistoryError carrying the conversation."""
    with pytest.raises(HistoryError) as info:
        history.append(Message.tool("orphan", tool_call_id="x"))
    assert "conv" in str(info.value)
