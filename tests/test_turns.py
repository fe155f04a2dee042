"""Turns and tool pairs: grouping, the refusals, exact round trips, and ``history.turns()`` on
every backend (in memory, fakeredis, real Redis, asyncio, cluster; see ``backends.py``)."""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from samples import turns as sample_turns

from redis_history import (
    InvalidMessageError,
    Message,
    RoleOrderError,
    ToolCall,
    ToolPair,
    ToolPairingError,
    ToolStep,
    Turn,
    from_turns,
    group_turns,
    to_messages,
)
from redis_history import turns as turns_module
from redis_history.context import group_entries
from redis_history.testing import InMemoryHistory


def call(call_id: str, name: str = "f") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments={"q": call_id})


def calls(*ids: str, content: str = "") -> Message:
    """An assistant message calling a tool once per id."""
    return Message.assistant(content, tool_calls=[call(i) for i in ids])


def result(call_id: str) -> Message:
    return Message.tool(f"result of {call_id}", tool_call_id=call_id)


def test_an_empty_list_has_no_turns() -> None:
    """No messages, no turns, and back."""
    assert group_turns([]) == []
    assert from_turns([]) == []


def test_pairs_at_turn_ends_keep_each_call_with_its_result() -> None:
    """A system prompt leads the first turn; each turn is user, a tool step, a reply."""
    messages = sample_turns(3)
    grouped = group_turns(messages)
    assert len(grouped) == 3
    assert grouped[0].lead == (messages[0],)
    assert [t.lead for t in grouped[1:]] == [(), ()]
    for turn, start in zip(grouped, (1, 5, 9), strict=True):
        step, reply = turn.steps
        assert turn.user == messages[start]
        assert isinstance(step, ToolStep)
        assert step.assistant == messages[start + 1]
        assert [(p.call, p.result) for p in step.pairs] == [
            (messages[start + 1].tool_calls[0], messages[start + 2])
        ]
        assert reply == messages[start + 3]
        assert turn.complete
    assert to_messages(grouped) == messages


def test_parallel_calls_answered_out_of_order_form_one_step_in_result_order() -> None:
    """Three calls in one assistant message, answered c, a, b: one step, three pairs, in the
    order the results came, so the messages come back exactly."""
    assistant = calls("a", "b", "c", content="Let me check three things.")
    messages = [
        Message.user("q"),
        assistant,
        result("c"),
        result("a"),
        result("b"),
        Message.assistant("done"),
    ]
    (turn,) = group_turns(messages)
    step, reply = turn.steps
    assert isinstance(step, ToolStep)
    assert step.assistant is assistant
    assert [p.call.id for p in step.pairs] == ["c", "a", "b"]
    assert all(p.result.tool_call_id == p.call.id for p in step.pairs)
    assert sorted((p.call for p in step.pairs), key=lambda c: c.id) == list(assistant.tool_calls)
    assert step.unanswered == ()
    assert reply == messages[-1]
    assert turn.tool_pairs == list(step.pairs)
    assert to_messages([turn]) == messages


def test_a_turn_holds_several_steps() -> None:
    """Two tool steps (one parallel), then the reply, all in the one user turn."""
    messages = [
        Message.system("sys"),
        Message.user("q"),
        calls("a"),
        result("a"),
        calls("b", "c"),
        result("b"),
        result("c"),
        Message.assistant("answer"),
        Message.user("thanks"),
        Message.assistant("welcome"),
    ]
    first, second = group_turns(messages)
    assert [type(s) for s in first.steps] == [ToolStep, ToolStep, Message]
    assert [len(s.pairs) for s in first.steps if isinstance(s, ToolStep)] == [1, 2]
    assert second == Turn(user=messages[8], steps=(messages[9],))
    assert from_turns([first, second]) == messages


def test_a_system_prompt_alone_is_a_turn_with_only_a_lead() -> None:
    """A history holding only its system prompt: one turn, no user, no steps."""
    system = Message.system("You are terse.")
    assert group_turns([system]) == [Turn(lead=(system,))]
    assert group_turns([system])[0].user is None


def test_a_trailing_user_message_is_a_turn_without_steps() -> None:
    """The model has not answered yet: the last turn has no step."""
    messages = [Message.user("q1"), Message.assistant("a1"), Message.user("q2")]
    assert group_turns(messages)[-1] == Turn(user=messages[2])


def test_a_summary_leads_the_first_turn() -> None:
    """What compaction writes (a system summary) leads like a system prompt; a summary of
    another role leads when ``summaries`` says it is one."""
    summary = Message.system("Summary: ...", metadata={"summary": True})
    rest = [Message.user("q"), Message.assistant("a")]
    assert group_turns([summary, *rest]) == [Turn(lead=(summary,), user=rest[0], steps=(rest[1],))]
    user_summary = Message.user("Earlier: ...")
    with pytest.raises(RoleOrderError):
        group_turns([user_summary, *rest])  # two user messages in a row
    (turn,) = group_turns([user_summary, *rest], summaries=1)
    assert turn.lead == (user_summary,)
    assert to_messages([turn]) == [user_summary, *rest]


def test_several_system_messages_at_the_head_all_lead() -> None:
    """Two summaries written by one splice, then the original prompt: one lead."""
    lead = [Message.system("s1"), Message.system("s2"), Message.system("prompt")]
    (turn,) = group_turns([*lead, Message.user("q")])
    assert turn.lead == tuple(lead)


def test_a_trailing_open_call_is_refused_unless_asked_for() -> None:
    """Calls whose results are not appended yet: ToolPairingError naming the assistant
    message, or, with ``allow_open``, an open last step that round-trips."""
    messages = [
        Message.user("q"),
        calls("a", "b"),
        result("b"),
    ]
    with pytest.raises(ToolPairingError, match="unanswered at the end: a") as refused:
        group_turns(messages)
    assert refused.value.index == 1
    (turn,) = group_turns(messages, allow_open=True)
    (step,) = turn.steps
    assert isinstance(step, ToolStep)
    assert [p.call.id for p in step.pairs] == ["b"]
    assert step.unanswered == (messages[1].tool_calls[0],)
    assert not step.complete
    assert not turn.complete
    assert from_turns([turn]) == messages
    assert to_messages(group_turns(messages[:2], allow_open=True)) == messages[:2]


@pytest.mark.parametrize(
    ("messages", "error", "index"),
    [
        pytest.param([Message.user("q"), result("a")], ToolPairingError, 1, id="orphan-result"),
        pytest.param(
            [Message.user("q"), calls("a"), result("a"), result("a")],
            ToolPairingError,
            3,
            id="duplicate-answer",
        ),
        pytest.param(
            [Message.user("q"), calls("a"), result("b")], ToolPairingError, 2, id="wrong-call"
        ),
        pytest.param(
            [Message.user("q"), calls("a"), Message.user("again")],
            ToolPairingError,
            2,
            id="unanswered-then-user",
        ),
        pytest.param(
            [Message.user("q"), calls("a", "b"), result("a"), Message.assistant("x")],
            ToolPairingError,
            3,
            id="half-answered-then-assistant",
        ),
        pytest.param(
            [Message.user("q"), calls("a"), Message.user("u"), result("a")],
            ToolPairingError,
            2,
            id="result-after-the-turn-moved-on",
        ),
        pytest.param([result("a")], ToolPairingError, 0, id="result-first"),
        pytest.param(
            [Message.system("s"), Message.assistant("hello")], RoleOrderError, 1, id="no-user"
        ),
        pytest.param([Message.assistant("hi")], RoleOrderError, 0, id="assistant-first"),
        pytest.param(
            [Message.user("q"), Message.assistant("a"), Message.system("s")],
            RoleOrderError,
            2,
            id="late-system",
        ),
        pytest.param([Message.user("q"), Message.user("q")], RoleOrderError, 1, id="user-twice"),
        pytest.param(
            [Message.user("q"), Message.assistant("a"), Message.assistant("b")],
            RoleOrderError,
            2,
            id="assistant-twice",
        ),
    ],
)
def test_a_list_that_breaks_the_rules_is_refused_with_its_index(
    messages: list[Message], error: type[InvalidMessageError], index: int
) -> None:
    """Orphans, second answers, calls left open mid-list, roles out of order: refused, with the
    failing message's index, whatever ``allow_open`` says; the store refuses them too."""
    for allow_open in (False, True):
        with pytest.raises(error) as refused:
            group_turns(messages, allow_open=allow_open)
        assert refused.value.index == index
    with pytest.raises(error):
        InMemoryHistory().replace(messages)


def test_a_summary_carrying_tool_calls_cannot_lead() -> None:
    """A call or a result in the lead would be unmatched: refused."""
    for summary in (calls("a"), result("a")):
        with pytest.raises(ToolPairingError) as refused:
            group_turns([summary, Message.user("q")], summaries=1)
        assert refused.value.index == 0


def test_summaries_must_be_within_the_list() -> None:
    """A summary count outside the list is a ValueError."""
    with pytest.raises(ValueError, match="summaries"):
        group_turns([Message.user("q")], summaries=2)
    with pytest.raises(ValueError, match="summaries"):
        group_turns([], summaries=-1)


# -- tool pairs are made by grouping only --------------------------------------------------------


def grouped_step() -> ToolStep:
    (turn,) = group_turns([Message.user("q"), calls("a", "b"), result("a"), result("b")])
    step = turn.steps[0]
    assert isinstance(step, ToolStep)
    return step


def test_a_tool_pair_cannot_be_built_from_its_parts() -> None:
    """ToolPair has no public constructor: not a matched pair, not an unmatched one, not by
    ``dataclasses.replace``; ToolStep neither."""
    step = grouped_step()
    pair = step.pairs[0]
    attempts: list[Callable[[], object]] = [
        lambda: ToolPair(call("a"), result("a")),
        lambda: ToolPair(call=call("a"), result=result("zzz")),
        ToolPair,
        lambda: dataclasses.replace(pair, result=result("zzz")),
        lambda: ToolStep(step.assistant, step.pairs[:1], ()),
        lambda: dataclasses.replace(step, pairs=step.pairs[:1]),
    ]
    for attempt in attempts:
        with pytest.raises(TypeError, match="made by group_turns"):
            attempt()


def test_pairs_and_steps_are_immutable() -> None:
    """Their fields cannot be reassigned."""
    step = grouped_step()
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.pairs[0].result = result("zzz")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.pairs = ()  # type: ignore[misc]


def test_copies_and_pickles_keep_the_pairs() -> None:
    """Copying or pickling grouped turns gives equal turns (no constructor needed)."""
    grouped = group_turns(sample_turns(2))
    assert copy.copy(grouped) == grouped
    assert copy.deepcopy(grouped) == grouped
    assert pickle.loads(pickle.dumps(grouped)) == grouped


@pytest.mark.parametrize(
    ("build", "error"),
    [
        pytest.param(lambda: Turn(user=Message.user("q"), steps=(result("a"),)), ToolPairingError),
        pytest.param(lambda: Turn(user=Message.user("q"), steps=(calls("a"),)), ToolPairingError),
        pytest.param(lambda: Turn(lead=(calls("a"),), user=Message.user("q")), ToolPairingError),
        pytest.param(lambda: Turn(lead=(result("a"),)), ToolPairingError),
        pytest.param(lambda: Turn(user=Message.assistant("no")), RoleOrderError),
        pytest.param(Turn, RoleOrderError, id="empty"),
        pytest.param(
            lambda: Turn(lead=(Message.system("s"),), steps=(Message.assistant("a"),)),
            RoleOrderError,
        ),
        pytest.param(
            lambda: Turn(user=Message.user("q"), steps=(Message.user("again"),)), RoleOrderError
        ),
        pytest.param(lambda: Turn(user=Message.user("q"), steps=("text",)), TypeError),  # type: ignore[arg-type]
    ],
)
def test_a_turn_built_by_hand_holds_only_whole_pairs_in_order(
    build: Any, error: type[Exception]
) -> None:
    """A Turn takes messages and grouped steps; a loose call or result, or a part out of role
    order, is refused when it is built."""
    with pytest.raises(error):
        build()


def test_a_turn_can_be_rebuilt_without_some_steps() -> None:
    """A strategy may drop a whole tool step from a turn, and the rest stays well-formed."""
    messages = [Message.user("q"), calls("a"), result("a"), Message.assistant("done")]
    (turn,) = group_turns(messages)
    lean = dataclasses.replace(turn, steps=turn.steps[1:])
    assert from_turns([lean]) == [messages[0], messages[3]]


def test_from_turns_refuses_what_rearranging_breaks() -> None:
    """Dropping whole turns is fine; a lead after the first turn, a turn left ending in a tool
    step before another, or an open step moved before another turn, is refused."""
    history = sample_turns(3)
    first, second, third = group_turns(history)
    assert from_turns([first, third]) == [*first.to_messages(), *third.to_messages()]
    assert from_turns([second, third]) == history[5:]
    with pytest.raises(RoleOrderError, match="only the first turn"):
        from_turns([second, first])
    no_reply = dataclasses.replace(second, steps=second.steps[:1])
    with pytest.raises(RoleOrderError):
        from_turns([first, no_reply, third])
    (open_turn,) = group_turns([Message.user("q"), calls("x")], allow_open=True)
    with pytest.raises(ToolPairingError):
        from_turns([open_turn, second])
    assert from_turns([second, open_turn]) == [*second.to_messages(), *open_turn.to_messages()]


# -- properties ----------------------------------------------------------------------------------

texts = st.text(max_size=8)


@st.composite
def well_formed(draw: st.DrawFn, *, open_tail: bool = False) -> list[Message]:
    """A history the store accepts: an optional system prompt, then turns of user, tool steps
    (parallel calls answered in any order) and a reply; the last turn may stop early, and with
    ``open_tail`` with calls unanswered."""
    serial = iter(range(10_000))

    def ids(n: int) -> list[str]:
        return [f"c{next(serial)}" for _ in range(n)]

    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message.system(draw(texts)))
    n_turns = draw(st.integers(0, 4))
    for t in range(n_turns):
        last = t == n_turns - 1
        out.append(Message.user(draw(texts)))
        for _ in range(draw(st.integers(0, 3))):
            call_ids = ids(draw(st.integers(1, 3)))
            out.append(calls(*call_ids, content=draw(texts)))
            order = draw(st.permutations(call_ids))
            out += [result(i) for i in order]
        if not last or draw(st.booleans()):
            out.append(Message.assistant(draw(texts)))
        elif open_tail and draw(st.booleans()):
            call_ids = ids(draw(st.integers(1, 3)))
            out.append(calls(*call_ids))
            answered = draw(st.integers(0, len(call_ids) - 1))
            out += [result(i) for i in draw(st.permutations(call_ids))[:answered]]
    return out


def check_shape(grouped: list[Turn]) -> None:
    """Every pair matches its call, every step holds exactly its assistant's calls, only the
    first turn leads, and only the last may end without a plain reply."""
    for position, turn in enumerate(grouped):
        assert position == 0 or not turn.lead
        for step in turn.steps:
            if isinstance(step, ToolStep):
                assert all(p.result.tool_call_id == p.call.id for p in step.pairs)
                got = [p.call for p in step.pairs] + list(step.unanswered)
                assert sorted(c.id for c in got) == sorted(c.id for c in step.assistant.tool_calls)
        if position < len(grouped) - 1:
            assert isinstance(turn.steps[-1], Message)


@settings(max_examples=300, deadline=None)
@given(well_formed())
def test_every_well_formed_list_round_trips(messages: list[Message]) -> None:
    """to_messages(group_turns(m)) == m and from_turns gives the same, for every list the
    store accepts; each pair matches."""
    grouped = group_turns(messages)
    assert to_messages(grouped) == messages
    assert from_turns(grouped) == messages
    assert all(turn.complete for turn in grouped)
    check_shape(grouped)


@settings(max_examples=200, deadline=None)
@given(well_formed(open_tail=True))
def test_every_list_read_mid_turn_round_trips(messages: list[Message]) -> None:
    """With ``allow_open``, a history stopped while a tool runs groups and comes back exactly."""
    grouped = group_turns(messages, allow_open=True)
    assert to_messages(grouped) == messages
    assert from_turns(grouped) == messages
    assert all(turn.complete for turn in grouped[:-1])
    check_shape(grouped)


@settings(max_examples=200, deadline=None)
@given(well_formed(), st.data())
def test_any_choice_of_whole_turns_is_well_formed(
    messages: list[Message], data: st.DataObject
) -> None:
    """A strategy that keeps any subset of whole turns, in order, gets a list that groups back
    into exactly those turns."""
    grouped = group_turns(messages)
    kept = [turn for turn in grouped if data.draw(st.booleans())]
    assert group_turns(from_turns(kept)) == kept


specs = st.tuples(
    st.sampled_from(["system", "user", "assistant", "tool"]),
    st.sets(st.sampled_from(["a", "b", "c"]), max_size=2),
    st.sampled_from(["a", "b", "c"]),
)


def from_spec(spec: tuple[str, set[str], str]) -> Message:
    role, call_ids, answer = spec
    if role == "assistant":
        return calls(*sorted(call_ids))
    if role == "tool":
        return result(answer)
    return Message(role=role, content=role)


@settings(max_examples=400, deadline=None)
@given(st.lists(specs.map(from_spec), max_size=8))
def test_a_list_groups_exactly_when_the_store_accepts_it(messages: list[Message]) -> None:
    """Random role sequences: grouping (mid-turn allowed) succeeds exactly when the store's
    rules accept the list, and refuses with the same error otherwise."""
    assume(not (len(messages) > 1 and messages[0].role == messages[1].role == "system"))
    try:
        InMemoryHistory().replace(messages)
        store: type[Exception] | None = None
    except InvalidMessageError as exc:
        store = type(exc)
    if store is not None:
        with pytest.raises(store):
            group_turns(messages, allow_open=True)
    else:
        assert to_messages(group_turns(messages, allow_open=True)) == messages


@settings(max_examples=400, deadline=None)
@given(st.lists(specs.map(from_spec), max_size=8))
def test_a_list_groups_leniently_exactly_when_the_lenient_store_accepts_it(
    messages: list[Message],
) -> None:
    """The same for the lenient rules: ``roles="lenient"`` grouping succeeds exactly when a
    lenient store accepts the list, and gives the strict grouping wherever that succeeds."""
    assume(not (len(messages) > 1 and messages[0].role == messages[1].role == "system"))
    try:
        InMemoryHistory(roles="lenient").replace(messages)
        store: type[Exception] | None = None
    except InvalidMessageError as exc:
        store = type(exc)
    if store is not None:
        with pytest.raises(store):
            group_turns(messages, allow_open=True, roles="lenient")
        return
    grouped = group_turns(messages, allow_open=True, roles="lenient")
    assert to_messages(grouped) == messages
    assert from_turns(grouped, roles="lenient") == messages
    try:
        strict = group_turns(messages, allow_open=True)
    except InvalidMessageError:
        return
    assert grouped == strict


def test_summaries_that_read_as_turns_only_leniently_lead_as_the_strict_rules_read_them() -> None:
    """A summary written as a user message, then a user's question: the strict rules take the
    list only with the summary leading, so the lenient rules group it so too, not as two
    turns of their own; without the question, both read the summary as a turn."""
    summary = Message.user("Summary: the user flies from Porto.")
    question, answer = Message.user("And back?"), Message.assistant("On Friday.")
    strict = group_turns([summary, question, answer], summaries=1)
    assert strict[0].lead == (summary,)
    assert group_turns([summary, question, answer], summaries=1, roles="lenient") == strict
    alone = group_turns([summary, answer], summaries=1, roles="lenient")
    assert alone == group_turns([summary, answer], summaries=1)
    assert alone[0].user == summary


# -- history.turns() on every backend ------------------------------------------------------------


def test_history_turns_reads_the_conversation_as_turns(history: Any) -> None:
    """A stored conversation with parallel calls answered out of order reads back as the same
    turns ``group_turns`` makes of its snapshot; an empty one as no turns."""
    assert history.turns() == []
    messages = [
        Message.system("sys"),
        Message.user("q"),
        calls("a", "b"),
        result("b"),
        result("a"),
        Message.assistant("done"),
        Message.user("more"),
        Message.assistant("sure"),
    ]
    history.append_many(messages)
    assert history.turns() == group_turns(messages)
    assert to_messages(history.turns()) == history.snapshot() == messages


def test_history_turns_reads_a_conversation_mid_turn(history: Any) -> None:
    """While a tool runs, turns() shows the open step; ``allow_open=False`` refuses, naming the
    conversation."""
    history.append_many([Message.user("q"), calls("a", "b"), result("b")])
    (turn,) = history.turns()
    assert not turn.complete
    assert [c.id for c in turn.steps[0].unanswered] == ["a"]
    with pytest.raises(ToolPairingError) as refused:
        history.turns(allow_open=False)
    assert refused.value.conversation_id == "conv"
    history.append(result("a"))
    assert history.turns(allow_open=False)[0].complete


def test_history_turns_leads_with_the_stored_summaries(history: Any) -> None:
    """The messages ``splice_prefix`` wrote lead the first turn whatever their role (a user
    summary here, which a plain ``group_turns`` of the snapshot would refuse)."""
    history.append_many(sample_turns(2))
    summary = Message.user("Earlier: the user asked q0.")
    assert history.splice_prefix(5, summary) == 5
    (turn,) = history.turns()
    assert turn.lead == (summary,)
    assert turn.user is not None
    assert turn.user.content == "q1"
    assert to_messages([turn]) == history.snapshot()
    assert group_entries(history.entries()) == [turn]
    with pytest.raises(RoleOrderError):
        group_turns(history.snapshot())


def test_history_turns_refuses_a_history_that_does_not_group(make_history: Any) -> None:
    """Written without validation, an orphan result is stored but does not group: the error
    names the conversation and the index."""
    history = make_history("unchecked", validate=False)
    history.append_many([Message.user("q"), result("a")])
    with pytest.raises(ToolPairingError) as refused:
        history.turns()
    assert refused.value.index == 1
    assert refused.value.conversation_id == "unchecked"


# -- where turns sit -----------------------------------------------------------------------------


def package_imports(module: str) -> set[str]:
    """The ``redis_history`` modules ``module``'s source imports, anywhere in it."""
    source = importlib.import_module(module).__file__
    assert source is not None
    names: set[str] = set()
    with open(source, encoding="utf-8") as file:
        tree = ast.parse(file.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {name for name in names if name.startswith("redis_history")}


def test_turns_sit_under_the_store_that_reads_them() -> None:
    """The grouping needs only the models, the role rules and the errors (a stored entry is
    read through a protocol), so
    the histories can return turns without importing the context layer, which imports them."""
    assert package_imports(turns_module.__name__) == {
        "redis_history.errors",
        "redis_history.models",
        "redis_history.roles",
    }
    for reader in ("store.core", "store.history", "store.base", "testing"):
        imported = package_imports(f"redis_history.{reader}")
        assert "redis_history.turns" in imported
        assert not any(name.startswith("redis_history.context") for name in imported)
