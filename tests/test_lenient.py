"""The lenient role rules (``roles="lenient"``): a user message may follow a user message and an
assistant message an assistant message, while tool pairing and a system message only first hold
as in the strict rules. A conversation written so is read, rewritten, forked, compacted,
exported and imported, fitted and rendered by every later call, on every backend; a strict pod
appending after a lenient one checks its own messages against the stored last role."""

from __future__ import annotations

import io
from typing import Any

import pytest

from redis_history import (
    HistoryOptions,
    InvalidMessageError,
    Message,
    RedisHistory,
    RoleOrderError,
    ToolCall,
    ToolPairingError,
    from_turns,
    group_turns,
    to_messages,
)
from redis_history.admin import Target, export_conversation, import_conversation
from redis_history.compaction.run import choose_cut, run_compaction
from redis_history.compaction_policy import CompactionPolicy
from redis_history.context import HistoryManager, HistoryManagerConfig, fit_to_budget, render
from redis_history.context.budget import split_turns
from redis_history.testing import FakeSummarizer, InMemoryHistory


def calls(*ids: str) -> Message:
    return Message.assistant("", tool_calls=[ToolCall(id=i, name="weather") for i in ids])


def result(call_id: str) -> Message:
    return Message.tool(f"result {call_id}", tool_call_id=call_id)


def chatty() -> list[Message]:
    """What a chat app's user and agent write: a question sent in two messages, a reply in two,
    a tool step, then a user who writes again after the tool's result."""
    return [
        Message.system("You are a travel agent."),
        Message.user("Weather in Lisbon?"),
        Message.user("And in Porto?"),
        Message.assistant("Let me check."),
        calls("c1", "c2"),
        result("c2"),
        result("c1"),
        Message.user("Only Lisbon, sorry."),
        Message.assistant("Lisbon: 21 °C."),
        Message.assistant("Porto: 19 °C, for the record."),
        Message.user("Thanks!"),
        Message.user("Bye."),
    ]


def pods(make_history: Any) -> tuple[Any, Any]:
    """A lenient and a strict pod on one conversation (skipped for the in-memory model, which
    one object holds: the stateful test switches its rules instead)."""
    lenient, strict = make_history(roles="lenient"), make_history()
    if isinstance(lenient, InMemoryHistory):
        pytest.skip("the in-memory history is one pod")
    return lenient, strict


def state(history: Any) -> tuple[Any, ...]:
    """What a reader sees of a history, to check that a refused write changed nothing."""
    return history.entries(), history.token_estimate(), history.transcript()


# -- the rules -----------------------------------------------------------------------------------


def test_roles_is_an_option_checked_when_made() -> None:
    """Strict by default; anything but "strict" or "lenient" is refused with a typed error."""
    assert HistoryOptions().roles == "strict"
    assert HistoryOptions(roles="lenient").roles == "lenient"
    with pytest.raises(ValueError, match="'strict' or 'lenient'"):
        HistoryOptions(roles="loose")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'strict' or 'lenient'"):
        HistoryOptions(roles=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'strict' or 'lenient'"):
        InMemoryHistory(roles="Lenient")  # type: ignore[arg-type]


def test_a_lenient_history_takes_messages_of_one_role_in_a_row(make_history: Any) -> None:
    """Two user messages and two assistant messages in a row, one at a time or in one batch,
    and a user message after tool results, are stored as written."""
    history = make_history(roles="lenient")
    messages = chatty()
    history.append_many(messages[:2])
    history.append(messages[2])
    history.append_many(messages[3:8])
    for message in messages[8:]:
        history.append(message)
    assert history.snapshot() == messages


def test_the_strict_rules_are_the_default(make_history: Any) -> None:
    """A history made without ``roles`` refuses the second user message, nothing written."""
    history = make_history()
    history.append(Message.user("Weather in Lisbon?"))
    before = state(history)
    with pytest.raises(RoleOrderError, match="a user message may not follow user"):
        history.append(Message.user("And in Porto?"))
    with pytest.raises(RoleOrderError, match="may not follow assistant") as refused:
        history.append_many([Message.assistant("a"), Message.assistant("b")])
    assert refused.value.index == 1
    assert state(history) == before


@pytest.mark.parametrize(
    ("stored", "batch", "error", "match"),
    [
        pytest.param(
            [Message.user("q")],
            [result("nobody-asked")],
            ToolPairingError,
            "answers no open tool call",
            id="orphan-result",
        ),
        pytest.param(
            [Message.user("q"), calls("c1")],
            [Message.user("q again")],
            ToolPairingError,
            "while tool calls are unanswered: c1",
            id="user-while-a-call-is-open",
        ),
        pytest.param(
            [Message.user("q"), calls("c1", "c2"), result("c1")],
            [Message.assistant("done")],
            ToolPairingError,
            "while tool calls are unanswered: c2",
            id="assistant-while-a-call-is-open",
        ),
        pytest.param(
            [Message.user("q"), calls("c1"), result("c1")],
            [result("c1")],
            ToolPairingError,
            "answers no open tool call",
            id="a-call-answered-twice",
        ),
        pytest.param(
            [Message.user("q")],
            [Message.system("late")],
            RoleOrderError,
            "only come first",
            id="late-system",
        ),
        pytest.param(
            [], [Message.assistant("hello")], RoleOrderError, "follow nothing", id="assistant-first"
        ),
        pytest.param(
            [Message.system("s")],
            [Message.assistant("hello")],
            RoleOrderError,
            "follow system",
            id="assistant-after-the-system-prompt",
        ),
    ],
)
def test_the_lenient_rules_keep_tool_pairing_and_the_system_message_first(
    make_history: Any,
    stored: list[Message],
    batch: list[Message],
    error: type[InvalidMessageError],
    match: str,
) -> None:
    """What the lenient rules still refuse, as the strict ones do, having written nothing."""
    history = make_history(roles="lenient")
    if stored:
        history.append_many(stored)
    before = state(history)
    with pytest.raises(error, match=match):
        history.append_many(batch)
    with pytest.raises(error, match=match) as refused:
        history.append_many([*batch, Message.user("after")])
    assert refused.value.index == 0
    assert state(history) == before


def test_without_validation_nothing_is_checked_whatever_the_rules(make_history: Any) -> None:
    """``validate=False`` still means no checks with the lenient rules."""
    history = make_history(roles="lenient", validate=False)
    history.append_many([Message.assistant("hello"), result("nobody-asked")])
    assert len(history.snapshot()) == 2


def test_a_strict_pod_checks_only_its_own_messages_after_a_lenient_one(
    make_history: Any,
) -> None:
    """After a lenient pod's user, user, a strict pod's assistant reply is taken (checked
    against the stored last role), its second user message in a row is not."""
    lenient, strict = pods(make_history)
    lenient.append_many([Message.system("s"), Message.user("a"), Message.user("b")])
    strict.append(Message.assistant("c"))
    lenient.append(Message.assistant("d"))
    strict.append(Message.user("e"))
    with pytest.raises(RoleOrderError, match="may not follow user"):
        strict.append(Message.user("f"))
    lenient.append(Message.user("f"))
    strict.append_many([calls("c1"), result("c1"), Message.assistant("g")])
    assert [m.content for m in strict.snapshot()][1:] == [
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "",
        "result c1",
        "g",
    ]


def test_a_rollback_checks_what_remains_by_its_history_s_rules(make_history: Any) -> None:
    """Removing the assistant between two user messages leaves them in a row: a lenient pod
    may, a strict pod is refused (stale) and nothing changes."""
    lenient, strict = pods(make_history)
    messages = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    strict.append_many(messages)
    before = state(strict)
    with pytest.raises(Exception, match="out of order: a user message may not follow user"):
        strict.rollback([messages[1]])
    assert state(strict) == before
    assert lenient.rollback([messages[1]]) == 1
    assert [m.content for m in lenient.snapshot()] == ["a", "c"]
    calling = calls("c1")
    lenient.append_many([calling, result("c1")])
    assert lenient.rollback([lenient.snapshot()[-1]], reopen_calls=True) == 1
    lenient.append(result("c1"))
    with pytest.raises(Exception, match="part tool call c1 from its result"):
        lenient.rollback([lenient.snapshot()[-1]])


# -- every later call takes what the lenient rules wrote -----------------------------------------


def test_a_lenient_conversation_is_read_and_rewritten_by_every_call(make_history: Any) -> None:
    """Reads, turns, truncate, replace, splice and a fork all take a conversation holding
    messages of one role in a row, from a lenient pod and (but for replace, which checks the
    new list by its own rules) from a strict one."""
    history, strict = pods(make_history)
    messages = chatty()
    history.append_many(messages)
    assert strict.snapshot() == messages
    assert strict.snapshot_openai() == [m.to_openai() for m in messages]
    turns = strict.turns(allow_open=False)
    assert turns == history.turns() == group_turns(messages, roles="lenient")
    assert to_messages(turns) == messages
    assert [t.user.content for t in turns if t.user] == [
        "Weather in Lisbon?",
        "And in Porto?",
        "Only Lisbon, sorry.",
        "Thanks!",
        "Bye.",
    ]
    assert turns[0].steps == ()  # the first half of the question: a turn without steps
    assert len(turns[2].steps) == 2  # two replies in a row: two steps of one turn

    assert history.fork("branch", at=messages[8].id).options.roles == "lenient"
    fork = make_history("branch", roles="lenient")
    fork.append(Message.assistant("More?"))
    assert fork.snapshot()[:-1] == messages[:9]
    strict.fork("strict-branch", at=messages[2].id)
    assert make_history("strict-branch").snapshot() == messages[:3]

    with pytest.raises(RoleOrderError):
        strict.replace(messages, expected_ids=[m.id for m in messages])
    history.replace(messages, expected_ids=[m.id for m in messages])
    assert strict.truncate(len(messages) - 1) == 1
    strict.append(Message.assistant("Bye!"))
    prefix = history.turns()[0].to_messages() + history.turns()[1].to_messages()
    summary = Message.system("Summary: Lisbon and Porto.")
    assert strict.splice_prefix(len(prefix), summary, expected_ids=[m.id for m in prefix]) == 7
    assert strict.snapshot()[0] == summary
    assert [m.content for m in strict.transcript()][:3] == [m.content for m in messages[:3]]
    assert group_turns(strict.snapshot(), roles="lenient") == strict.turns()


def test_a_lenient_conversation_is_compacted_never_between_two_user_messages(
    client: Any,
) -> None:
    """The cut falls at a user message that does not follow another, so a question sent in two
    messages is summarized or kept whole; the compacted conversation reads and goes on."""
    history = RedisHistory(client, "chat", roles="lenient", token_counter="heuristic")
    history.append(Message.system("You are a travel agent."))
    for city in ("Lisbon", "Porto", "Faro", "Braga"):
        history.append_many([Message.user(f"{city}?"), Message.user("Tomorrow.")])
        history.append_many([Message.assistant("Sunny."), Message.assistant("21 °C.")])
    history.append_many([Message.user("Évora?"), Message.user("Also tomorrow.")])
    entries = history.entries()
    policy = CompactionPolicy(soft_tokens=10, keep_last_turns=1, min_messages=2)
    cut = choose_cut([e.message for e in entries], [e.tokens for e in entries], policy)
    assert cut is not None
    assert entries[cut.drop].message.content == "Évora?"
    outcome = run_compaction(history, FakeSummarizer("Four cities."), policy)
    assert outcome.status == "compacted"
    summary, *kept = history.snapshot()
    assert summary.role == "system"
    assert [m.content for m in kept] == ["Évora?", "Also tomorrow."]
    history.append(Message.assistant("Cloudy."))
    assert len(history.turns()) == 2
    assert [m.content for m in history.transcript()][1:3] == ["Lisbon?", "Tomorrow."]


def test_a_lenient_conversation_is_exported_and_imported(client: Any) -> None:
    """An export of a conversation holding messages of one role in a row imports, checked, and
    reads back equal; a strict pod goes on with it."""
    history = RedisHistory(client, "chat", namespace="a", roles="lenient")
    history.append_many(chatty())
    stream = io.BytesIO()
    export_conversation(Target(client, "a"), "chat", stream)
    _, copy = import_conversation(Target(client, "b"), io.BytesIO(stream.getvalue()), "copy")
    assert copy.options.roles == "strict"
    assert copy.entries() == history.entries()
    copy.append(Message.assistant("Goodbye."))
    assert copy.turns()[-1].steps == (copy.snapshot()[-1],)


def test_the_manager_keeps_a_question_sent_in_two_messages_whole() -> None:
    """Fitting drops whole turns; a user message left unanswered before the next goes with it,
    and the current turn holds both halves of the question."""
    messages = chatty()
    split = split_turns(messages)
    assert split.lead == messages[:1]
    assert split.older == [messages[1:7], messages[7:10]]
    assert split.current == messages[10:]
    fitted = fit_to_budget(messages, 60, counter="heuristic")
    assert fitted == [messages[0], *messages[7:]]
    manager = HistoryManager(HistoryManagerConfig(token_counter="heuristic"))
    prepared = manager.prepare_messages(10_000, None, messages[:-1], [messages[-1]])
    assert prepared.messages[1:] == messages[1:]
    assert not prepared.dropped


def test_messages_of_one_role_in_a_row_render_in_every_wire_format() -> None:
    """Chat completions and Responses keep them as they are; Anthropic, which wants user and
    assistant to alternate, merges each run into one turn of several blocks, as its API
    does itself."""
    messages = chatty()
    chat = render(messages, "openai_chat")["messages"]
    assert [m["role"] for m in chat[:4]] == ["system", "user", "user", "assistant"]
    responses = render(messages, "openai_responses")["input"]
    assert [item.get("role") for item in responses[:4]] == ["system", "user", "user", "assistant"]
    anthropic = render(messages, "anthropic")["messages"]
    assert [turn["role"] for turn in anthropic] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert [b["text"] for b in anthropic[0]["content"]] == ["Weather in Lisbon?", "And in Porto?"]
    assert [b["type"] for b in anthropic[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert [b["type"] for b in anthropic[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert [b["text"] for b in anthropic[3]["content"]] == [
        "Lisbon: 21 °C.",
        "Porto: 19 °C, for the record.",
    ]


def test_grouping_reads_what_either_rules_wrote_as_the_strict_rules_read_it() -> None:
    """``roles="lenient"`` takes runs of one role; a list the strict rules take groups as
    they group it (a user summary still leads)."""
    messages = chatty()
    with pytest.raises(RoleOrderError):
        group_turns(messages)
    turns = group_turns(messages, roles="lenient")
    assert from_turns(turns, roles="lenient") == messages
    with pytest.raises(RoleOrderError):
        from_turns(turns)
    summary, rest = Message.user("Earlier: ..."), [Message.user("q"), Message.assistant("a")]
    assert group_turns([summary, *rest], summaries=1, roles="lenient") == group_turns(
        [summary, *rest], summaries=1
    )
    assert len(group_turns([summary, *rest], roles="lenient")) == 2
    with pytest.raises(RoleOrderError, match="follow nothing"):
        group_turns([Message.assistant("hello"), Message.user("q")], roles="lenient")
