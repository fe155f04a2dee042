"""No rewrite parts a tool call from its result: splice_prefix, truncate and rollback refuse,
writing nothing, a result in which a tool result has no call or an answered call lost its
result (replace checks the new list whole). Run on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from redis_history import (
    Message,
    StaleSnapshotError,
    ToolCall,
    ToolPairingError,
)
from redis_history.context import render


def state(history: Any) -> tuple[Any, ...]:
    """Everything observable about a history, to check that a refused write changed nothing."""
    return (history.entries(), history.token_estimate(), history.transcript(), history.len())


def answered(call_ids: str = "c1") -> list[Message]:
    """The guide's conversation: a system prompt, a question, calls, their results, an answer."""
    calls = call_ids.split(",")
    return [
        Message.system("You are a travel agent."),
        Message.user("Weather in Lisbon?"),
        Message.assistant("", tool_calls=[ToolCall(id=c, name="weather") for c in calls]),
        *(Message.tool(f'{{"temp_c": 2{i}}}', tool_call_id=c) for i, c in enumerate(calls)),
        Message.assistant("21 °C and sunny."),
    ]


def test_the_readme_splice_that_orphaned_a_result_is_refused(history: Any) -> None:
    """Splicing the system prompt, the question and the call, not the result, is refused
    whole; the conversation still renders in every format and reads as turns."""
    history.append_many(answered())
    prefix = history.snapshot()[:3]
    before = state(history)
    with pytest.raises(ToolPairingError, match="result of tool call c1 without its call"):
        history.splice_prefix(
            3, Message.system("Summary: ..."), expected_ids=[m.id for m in prefix]
        )
    assert state(history) == before
    history.turns(allow_open=False)
    for wire in ("openai_chat", "openai_responses", "anthropic"):
        render(history.snapshot(), wire)
    whole = history.turns()[0].to_messages()
    assert history.splice_prefix(len(whole), Message.system("Summary: ...")) == 5
    history.append(Message.user("And in Porto?"))
    assert [m.role for m in history.snapshot()] == ["system", "user"]


@pytest.mark.parametrize("drop", [3, 4])
def test_a_splice_inside_parallel_results_is_refused(history: Any, drop: int) -> None:
    """With two parallel calls, a cut after the call or after its first result is refused."""
    history.append_many(answered("c1,c2"))
    before = state(history)
    with pytest.raises(ToolPairingError):
        history.splice_prefix(drop, Message.system("s"))
    assert state(history) == before
    assert history.splice_prefix(6, Message.system("s")) == 6


def test_a_compactor_may_keep_the_call_its_kept_results_answer(history: Any) -> None:
    """Summaries that make the call the kept results answer are accepted (a compactor that
    keeps a turn's call); a call of theirs left unanswered before a message is refused."""
    history.append_many(answered("c1,c2"))
    call = history.snapshot()[2]
    before = state(history)
    with pytest.raises(ToolPairingError, match="unanswered"):
        history.splice_prefix(5, [Message.system("s"), Message.user("q"), call])
    assert state(history) == before
    assert history.splice_prefix(3, [Message.system("s"), Message.user("q"), call]) == 3
    history.turns(allow_open=False)
    history.append(Message.user("next"))


def test_a_splice_of_everything_may_not_leave_an_answered_call_open(history: Any) -> None:
    """Replacing the whole conversation by summaries that end in a call it had answered is
    refused; one that ends in a call still awaiting its result is accepted."""
    history.append_many(answered())
    call = history.snapshot()[2]
    before = state(history)
    with pytest.raises(ToolPairingError, match="part tool call c1"):
        history.splice_prefix(5, [Message.system("s"), Message.user("q"), call])
    assert state(history) == before

    history.append_many([Message.user("and?"), *answered("c9")[2:3]])  # c9 awaits its result
    call = history.snapshot()[-1]
    assert history.splice_prefix(7, [Message.system("s"), Message.user("and?"), call]) == 7
    history.append(Message.tool("r9", tool_call_id="c9"))


@pytest.mark.parametrize("keep", [3, 4])
def test_a_truncate_between_a_call_and_its_results_is_refused(history: Any, keep: int) -> None:
    """truncate refuses a cut after a call or between its results; at the turn's end it cuts."""
    history.append_many(answered("c1,c2"))
    before = state(history)
    with pytest.raises(ToolPairingError, match="would part tool call"):
        history.truncate(keep)
    assert state(history) == before
    assert history.truncate(5) == 1
    history.append(Message.assistant("again"))


def test_a_rollback_of_a_result_alone_is_refused(history: Any) -> None:
    """Rolling back a tool result whose call stays is refused, at the tail too; the call and
    its results go together."""
    history.append_many(answered("c1,c2"))
    messages = history.snapshot()
    before = state(history)
    for gone in ([messages[3]], [messages[4], messages[5]], [messages[2]]):
        with pytest.raises(StaleSnapshotError):
            history.rollback(gone)
        assert state(history) == before
    assert history.rollback(messages[2:]) == 4
    assert [m.role for m in history.snapshot()] == ["system", "user"]


def test_reopen_calls_lets_an_undo_of_the_latest_output_reopen_its_call(history: Any) -> None:
    """reopen_calls=True lets the latest tool result go, its call awaiting a result again
    (an undo of a tool output); a result followed by the answer still may not go alone."""
    history.append_many(answered())
    messages = history.snapshot()
    with pytest.raises(StaleSnapshotError):
        history.rollback([messages[3]], reopen_calls=True)  # the answer follows it
    assert history.rollback([messages[4]]) == 1
    assert history.rollback([messages[3]], reopen_calls=True) == 1
    with pytest.raises(ToolPairingError):
        history.append(Message.user("too early"))
    history.append(Message.tool("retried", tool_call_id="c1"))
    history.turns(allow_open=False)


@pytest.mark.parametrize(
    "summaries",
    [
        [Message.tool("orphan", tool_call_id="zz")],
        [Message.assistant("", tool_calls=[ToolCall(id="k1", name="f")]), Message.user("x")],
        [Message.system("s"), Message.tool("orphan", tool_call_id="zz")],
    ],
    ids=["a result answering none of them", "a call left open before a message", "after a prompt"],
)
def test_summaries_that_do_not_pair_among_themselves_are_refused(
    history: Any, summaries: list[Message]
) -> None:
    """Summaries lead whatever their roles, but their own tool calls and results must pair:
    a splice whose summaries would not read as turns is refused, writing nothing."""
    history.append_many([Message.user("q"), Message.assistant("a"), Message.user("q2")])
    before = state(history)
    with pytest.raises(ToolPairingError):
        history.splice_prefix(2, summaries)
    assert state(history) == before
    assert history.splice_prefix(2, [Message.user("summary"), Message.assistant("ok")]) == 2
    history.turns(allow_open=False)
