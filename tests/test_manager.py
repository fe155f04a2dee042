"""HistoryManager: each strategy's request fits the budget with whole turns and the current
turn; memories, summaries and diagnostics; on_turn_complete keeps what was dropped."""

from __future__ import annotations

import json
import urllib.request
from typing import Any, get_args

import pytest
from chat_server import ChatServer, Reply, completion
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from samples import conversations

from redis_history import BudgetExceededError, ExtractiveSummarizer, Message, ToolCall
from redis_history.context import (
    WIRE_FORMATS,
    HistoryManager,
    HistoryManagerConfig,
    Strategy,
    group_turns,
    parse_response,
    render,
    request_tokens,
    to_messages,
)
from redis_history.context.manager import MEMORY_HEADER
from redis_history.memory import InMemoryMemory, LongTermMemory, MemoryFilters, MemoryRecord

STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
PROMPT = "You are a travel agent."
EXACT = "o200k_base"


def manager(strategy: Strategy = "token_budget", **options: Any) -> HistoryManager:
    return HistoryManager(HistoryManagerConfig(strategy=strategy, token_counter=EXACT, **options))


def turn(i: int, *, tools: int = 0, size: int = 1) -> list[Message]:
    """A user message, one tool step with ``tools`` parallel calls (if any), a reply."""
    out = [Message.user(f"question {i} " * size)]
    if tools:
        ids = [f"t{i}_{k}" for k in range(tools)]
        calls = [ToolCall(id=c, name="lookup", arguments={"q": i}) for c in ids]
        out.append(Message.assistant("", tool_calls=calls))
        out += [Message.tool(f"result {c} " * size, tool_call_id=c) for c in reversed(ids)]
    out.append(Message.assistant(f"answer {i} " * size))
    return out


def conversation(n: int, **kwargs: Any) -> list[list[Message]]:
    return [turn(i, **kwargs) for i in range(n)]


def flat(turns: list[list[Message]]) -> list[Message]:
    return [m for t in turns for m in t]


def price(messages: list[Message]) -> int:
    return request_tokens(messages, counter=EXACT)


def system_text(messages: list[Message]) -> str:
    assert messages[0].role == "system"
    return messages[0].content


def assert_whole(messages: list[Message]) -> None:
    """Every call in ``messages`` has its result and the list groups as turns."""
    calls = {c.id for m in messages for c in m.tool_calls}
    assert calls == {m.tool_call_id for m in messages if m.role == "tool"}
    assert to_messages(group_turns(messages)) == messages


# -- configuration -------------------------------------------------------------------------------


def test_the_config_is_validated_and_frozen() -> None:
    """An unknown strategy, a negative number or an unknown field is refused; a config is
    immutable."""
    with pytest.raises(ValidationError):
        HistoryManagerConfig(strategy="everything")
    with pytest.raises(ValidationError):
        HistoryManagerConfig(memory_token_budget=-1)
    with pytest.raises(ValidationError):
        HistoryManagerConfig(window_turns=0)
    with pytest.raises(ValidationError):
        HistoryManagerConfig(strategy_name="token_budget")  # type: ignore[call-arg]
    config = HistoryManagerConfig()
    with pytest.raises(ValidationError):
        config.strategy = "sliding_window"  # type: ignore[misc]


def test_builders_chain_and_report() -> None:
    """``with_*`` return the manager; ``summaries()`` and ``strategy_name()`` say what it holds."""
    memory = InMemoryMemory()
    built = (
        manager("summary_and_tail")
        .with_summarizer(ExtractiveSummarizer())
        .with_memory(memory)
        .with_summaries(["Previously: a", "Previously: b"])
    )
    assert built.strategy_name() == "summary_and_tail"
    assert built.summaries() == ["Previously: a", "Previously: b"]
    assert isinstance(memory, LongTermMemory)
    with pytest.raises(TypeError, match="LongTermMemory"):
        built.with_memory(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown long-term memory"):
        built.with_memory("redis")
    assert isinstance(built.with_memory("in_memory")._memory, InMemoryMemory)
    assert isinstance(
        built.with_memory("redis_history.memory.base:InMemoryMemory")._memory, InMemoryMemory
    )
    with pytest.raises(ValueError, match="unknown summarizer"):
        built.with_summarizer("nope")
    with pytest.raises(ValueError, match="unknown token counter"):
        HistoryManager(HistoryManagerConfig(token_counter="no-such-counter"))


# -- strategies on crafted histories -------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_empty_history_sends_the_prompt_and_the_current_turn(strategy: Strategy) -> None:
    """No history: the system message and the current turn, nothing dropped."""
    question = [Message.user("Lisbon or Porto?")]
    prepared = manager(strategy).prepare_messages(1000, PROMPT, [], question)
    assert prepared.request == render(question, "openai_chat", PROMPT)
    assert prepared.diagnostics.dropped == ()
    assert prepared.diagnostics.total == price(prepared.messages)
    empty = manager(strategy).prepare_messages(1000, None, [], [])
    assert empty.messages == []
    assert empty.request == {"messages": []}
    assert empty.diagnostics.total == 3


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_system_message_only_history(strategy: Strategy) -> None:
    """A history of its system prompt alone: that prompt, once (also when given again)."""
    stored = [Message.system(PROMPT)]
    for given_prompt in (None, PROMPT):
        prepared = manager(strategy).prepare_messages(1000, given_prompt, stored)
        assert [(m.role, m.content) for m in prepared.messages] == [("system", PROMPT)]
    with pytest.raises(BudgetExceededError):
        manager(strategy).prepare_messages(5, None, stored)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_pairs_at_the_cut_and_parallel_calls_stay_whole(strategy: Strategy) -> None:
    """At every budget, every strategy sends whole turns: each call with its result, three
    parallel calls together, and the current turn always."""
    turns = conversation(6, tools=3, size=15)
    history, current = flat(turns[:-1]), turns[-1]
    least = price([Message.system(PROMPT), *current])
    for budget in range(least, price([Message.system(PROMPT), *flat(turns)]) + 50, 41):
        prepared = manager(strategy, window_turns=4).prepare_messages(
            budget, PROMPT, history, current
        )
        body = prepared.messages[1:]
        assert_whole(body)
        assert body[len(body) - len(current) :] == current
        assert prepared.diagnostics.total <= budget
        assert body == flat(turns[len(turns) - 1 - prepared.diagnostics.kept_turns :])


def test_sliding_window_sends_at_most_the_last_n_turns() -> None:
    """``sliding_window`` keeps the last ``window_turns`` turns (the current one included),
    fewer when the budget is short; what it leaves out is in the diagnostics."""
    turns = conversation(8, tools=1)
    history, current = flat(turns[:-1]), turns[-1]
    window = manager("sliding_window", window_turns=3)
    prepared = window.prepare_messages(100_000, PROMPT, history, current)
    assert prepared.messages[1:] == flat(turns[-3:])
    assert prepared.diagnostics.dropped == tuple(flat(turns[:-3]))
    assert prepared.diagnostics.dropped_turns == 5
    assert prepared.diagnostics.kept_turns == 2
    tight = price([Message.system(PROMPT), *flat(turns[-2:])])
    assert window.prepare_messages(tight, PROMPT, history, current).messages[1:] == flat(turns[-2:])
    one = manager("sliding_window", window_turns=1)
    assert one.prepare_messages(100_000, PROMPT, history, current).messages[1:] == current


def test_token_budget_keeps_as_many_turns_as_fit_and_a_budget_exactly_met() -> None:
    """``token_budget``: a budget equal to the price of the last three turns keeps exactly
    them; one token less keeps two."""
    turns = conversation(7, tools=2)
    history, current = flat(turns[:-1]), turns[-1]
    three = price([Message.system(PROMPT), *flat(turns[-3:])])
    exact = manager().prepare_messages(three, PROMPT, history, current)
    assert exact.messages[1:] == flat(turns[-3:])
    assert exact.diagnostics.total == three
    short = manager().prepare_messages(three - 1, PROMPT, history, current)
    assert short.messages[1:] == flat(turns[-2:])
    assert short.diagnostics.dropped_turns == 5


def test_the_reserve_stays_free() -> None:
    """``reserve_tokens`` are part of the budget, left for the reply."""
    turns = conversation(7, tools=2)
    history, current = flat(turns[:-1]), turns[-1]
    three = price([Message.system(PROMPT), *flat(turns[-3:])])
    prepared = manager(reserve_tokens=10).prepare_messages(three + 10, PROMPT, history, current)
    assert prepared.messages[1:] == flat(turns[-3:])
    assert prepared.diagnostics.total + prepared.diagnostics.reserve == three + 10


def test_every_strategy_sends_the_managers_summaries_after_the_prompt() -> None:
    """The manager's summaries go into the one system message after the prompt and the
    memories, whatever the strategy, after compaction's own, and their tokens are counted."""
    stored = Message.system(
        f"{PROMPT}\n\nPreviously: booked TAP 1711.",
        metadata={"summary": True, "system_prompt": PROMPT},
    )
    turns = conversation(3)
    summaries = ["Previously: the user flies to Osaka on Friday."]
    for strategy in STRATEGIES:
        chosen = manager(strategy).with_summaries(summaries)
        prepared = chosen.prepare_messages(10_000, PROMPT, flat(turns))
        assert system_text(prepared.messages) == f"{PROMPT}\n\n{summaries[0]}"
        assert prepared.diagnostics.summaries == request_tokens(
            [Message.system(summaries[0])], counter=EXACT
        ) - request_tokens([Message.system("")], counter=EXACT)
        both = chosen.prepare_messages(10_000, PROMPT, [stored, *flat(turns)])
        assert system_text(both.messages) == (
            f"{PROMPT}\n\nPreviously: booked TAP 1711.\n\n{summaries[0]}"
        )


def test_a_stored_summary_is_sent_once_without_the_prompt_it_repeats() -> None:
    """Compaction's summary (the prompt, then the summary) leads the history: the system
    message holds the prompt once, then the summary, whatever the strategy."""
    stored = Message.system(
        f"{PROMPT}\n\nPreviously: booked TAP 1711.",
        metadata={"summary": True, "system_prompt": PROMPT},
    )
    turns = conversation(2)
    for strategy in STRATEGIES:
        for given_prompt in (PROMPT, None):
            prepared = manager(strategy).prepare_messages(
                10_000, given_prompt, [stored, *flat(turns)]
            )
            assert system_text(prepared.messages) == f"{PROMPT}\n\nPreviously: booked TAP 1711."
            assert prepared.messages[1:] == flat(turns)


def test_an_impossible_budget_raises_with_each_part() -> None:
    """When the system message and the current turn alone do not fit, the error names every
    part's tokens and what they add up to."""
    memory = InMemoryMemory()
    memory.store("The user prefers aisle seats.", {"agent_id": "a"})
    chosen = manager(
        "summary_and_tail", enable_long_term_memory=True, reserve_tokens=7
    ).with_memory(memory)
    chosen.with_summaries(["Previously: Osaka."])
    current = [Message.user("Which seat do I like? " * 20)]
    with pytest.raises(BudgetExceededError) as raised:
        chosen.prepare_messages(40, PROMPT, [], current, MemoryFilters("a"))
    error = raised.value
    assert set(error.parts) == {"system", "memories", "summaries", "current_turn", "reserve"}
    assert error.parts["reserve"] == 7
    assert all(error.parts[name] > 0 for name in error.parts)
    assert error.required == sum(error.parts.values()) > 40
    assert error.budget == 40
    assert str(error.required) in str(error)


@pytest.mark.parametrize("format", WIRE_FORMATS)
def test_the_request_is_rendered_in_the_format_asked_for(format: Any) -> None:
    """The request is ``render`` of the kept messages with the system message as its prompt."""
    turns = conversation(3, tools=2)
    prepared = manager().prepare_messages(
        100_000, PROMPT, flat(turns[:-1]), turns[-1], format=format
    )
    assert prepared.request == render(flat(turns), format, PROMPT)


def test_diagnostics_add_up_to_the_exact_count_of_the_request() -> None:
    """The parts add up to ``total``, which is the exact price of the messages sent."""
    memory = InMemoryMemory()
    memory.store("The user is vegetarian.", {"agent_id": "a"})
    turns = conversation(6, tools=2, size=5)
    chosen = (
        manager("summary_and_tail", enable_long_term_memory=True)
        .with_memory(memory)
        .with_summaries(["Previously: a trip to Osaka."])
    )
    prepared = chosen.prepare_messages(400, PROMPT, flat(turns[:-1]), turns[-1], MemoryFilters("a"))
    d = prepared.diagnostics
    assert d.system + d.memories + d.summaries + d.history + d.current_turn == d.total
    assert d.total == price(prepared.messages) <= 400
    assert d.history == price(prepared.messages[1 : len(prepared.messages) - len(turns[-1])]) - 3
    assert d.current_turn == price(turns[-1]) - 3
    assert d.memories_recalled == d.memories_kept == 1
    assert 0 < d.kept_turns < 5
    assert d.dropped_turns == 5 - d.kept_turns


# -- long-term memory ----------------------------------------------------------------------------


def test_a_question_sent_as_two_user_messages_recalls_by_both() -> None:
    """Under the lenient role rules a user may ask in two messages: the recall's query is
    both, in order, not the first alone."""
    asked_for: list[str] = []

    class Recording(InMemoryMemory):
        def recall(self, query: str, filters: MemoryFilters, top_k: int) -> list[MemoryRecord]:
            asked_for.append(query)
            return super().recall(query, filters, top_k)

    chosen = manager("token_budget", enable_long_term_memory=True).with_memory(Recording())
    asked = [Message.user("Book me a flight."), Message.user("From Porto, please.")]
    chosen.prepare_messages(10_000, PROMPT, [], asked, MemoryFilters("a"))
    assert asked_for == ["Book me a flight.\nFrom Porto, please."]


def test_memories_are_recalled_into_the_system_message_within_their_budget() -> None:
    """The memories nearest the current user message come after the prompt, as many as fit
    ``memory_token_budget``; those beyond it are left out and counted."""
    memory = InMemoryMemory()
    for i in range(5):
        memory.store(f"Fact {i}: the user likes window seats on flights. " * 3, {"agent_id": "a"})
    memory.store("Another agent's secret about seats.", {"agent_id": "b"})
    chosen = manager(enable_long_term_memory=True, memory_token_budget=60).with_memory(memory)
    current = [Message.user("Which seats on flights?")]
    prepared = chosen.prepare_messages(10_000, PROMPT, [], current, MemoryFilters("a"))
    text = system_text(prepared.messages)
    assert text.startswith(f"{PROMPT}\n\n{MEMORY_HEADER}\n- Fact 4")
    assert "secret" not in text
    d = prepared.diagnostics
    assert d.memories_recalled == 5
    assert 0 < d.memories_kept < 5
    assert 0 < d.memories <= 60


def test_memory_needs_a_memory_and_filters() -> None:
    """With long-term memory enabled, a missing memory or missing filters is a ValueError."""
    current = [Message.user("hi")]
    with pytest.raises(ValueError, match="with_memory"):
        manager(enable_long_term_memory=True).prepare_messages(1000, PROMPT, [], current)
    with_memory = manager(enable_long_term_memory=True).with_memory(InMemoryMemory())
    with pytest.raises(ValueError, match="memory_filters"):
        with_memory.prepare_messages(1000, PROMPT, [], current)


def test_in_memory_memory_filters_and_ranks() -> None:
    """Recall returns only memories every filter allows, nearest the query first, newest
    first on a tie, at most ``top_k``."""
    memory = InMemoryMemory()
    memory.store("likes Lisbon in spring", {"agent_id": "a", "user_id": "u1", "tags": ["city"]})
    memory.store("likes Porto wine", {"agent_id": "a", "user_id": "u2"})
    memory.store("flies from Lisbon", {"agent_id": "a", "user_id": "u1"})
    memory.store("likes Lisbon", {"agent_id": "b", "user_id": "u1"})
    found = memory.recall("Lisbon spring", MemoryFilters("a", user_id="u1"), top_k=5)
    assert [r.text for r in found] == ["likes Lisbon in spring", "flies from Lisbon"]
    assert found[0].score == 1.0
    tagged = memory.recall("Lisbon", MemoryFilters("a", tags=("city",)), top_k=5)
    assert [r.text for r in tagged] == ["likes Lisbon in spring"]
    assert [r.text for r in memory.recall("x", MemoryFilters("a"), top_k=1)] == [
        "flies from Lisbon"
    ]
    with pytest.raises(ValueError, match="agent_id"):
        memory.store("orphan", {})


# -- on_turn_complete ----------------------------------------------------------------------------


def test_on_turn_complete_summarizes_what_was_dropped_once_and_remembers_it() -> None:
    """What a request left out is summarized once (by id), kept for ``summary_and_tail``
    and stored in long-term memory with the conversation's identity."""
    memory = InMemoryMemory()
    chosen = manager(
        "summary_and_tail", enable_summarization=True, enable_long_term_memory=True
    ).with_memory(memory)
    turns = conversation(6, tools=1, size=10)
    budget = price([Message.system(PROMPT), *flat(turns[-2:])])
    filters = MemoryFilters("agent-1", "user-1", "conv-1")
    prepared = chosen.prepare_messages(budget, PROMPT, flat(turns[:-1]), turns[-1], filters)
    assert prepared.dropped
    summary = chosen.on_turn_complete(prepared.dropped, "agent-1", "user-1", "conv-1")
    assert summary is not None
    assert summary.startswith("Previously:")
    assert chosen.summaries() == [summary]
    [(_, text, metadata)] = memory.all()
    assert text == summary
    assert dict(metadata) == {
        "agent_id": "agent-1",
        "user_id": "user-1",
        "conversation_id": "conv-1",
        "kind": "summary",
    }
    assert chosen.on_turn_complete(prepared.dropped, "agent-1") is None  # already summarized
    assert chosen.on_turn_complete(turns[-1], "agent-1") is not None
    assert len(chosen.summaries()) == 2
    assert len(memory) == 2
    again = chosen.prepare_messages(2000, PROMPT, flat(turns[:-1]), turns[-1], filters)
    assert summary in system_text(again.messages)
    assert again.diagnostics.memories_kept == 1  # the second was stored for no user


def test_on_turn_complete_does_nothing_when_summarization_is_off() -> None:
    """Summarization disabled: nothing is summarized, kept or stored."""
    memory = InMemoryMemory()
    chosen = manager(enable_long_term_memory=True).with_memory(memory)
    assert chosen.on_turn_complete(flat(conversation(2)), "agent-1") is None
    assert chosen.summaries() == []
    assert len(memory) == 0


# -- properties ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    conversations(),
    st.sampled_from(STRATEGIES),
    st.integers(0, 4000),
    st.integers(1, 5),
    st.integers(0, 100),
)
def test_every_strategy_fits_whole_turns_and_the_current_turn(
    messages: list[Message], strategy: Strategy, budget: int, window: int, reserve: int
) -> None:
    """Whatever the history and budget, either the must-keep parts do not fit and it raises,
    or the request fits, is exactly priced, holds whole turns ending with the current one,
    and (``token_budget``) could not hold one more turn."""
    chosen = HistoryManager(
        HistoryManagerConfig(
            strategy=strategy,
            window_turns=window,
            reserve_tokens=reserve,
            token_counter="heuristic",
        )
    )
    turns = group_turns(messages)
    bodies = [t.to_messages()[len(t.lead) :] for t in turns]
    bodies = [b for b in bodies if b]
    roomy = chosen.prepare_messages(10**9, PROMPT, messages).diagnostics
    least = roomy.system + roomy.memories + roomy.summaries + roomy.current_turn + reserve
    if least > budget:
        with pytest.raises(BudgetExceededError) as raised:
            chosen.prepare_messages(budget, PROMPT, messages)
        assert raised.value.required == least
        return
    prepared = chosen.prepare_messages(budget, PROMPT, messages)
    d = prepared.diagnostics
    assert d.total + reserve <= budget
    assert d.total == request_tokens(prepared.messages, counter="heuristic")
    body = prepared.messages[1:]
    kept = d.kept_turns + (1 if bodies else 0)
    assert body == [m for b in bodies[len(bodies) - kept :] for m in b]
    assert list(d.dropped) == [m for b in bodies[: len(bodies) - kept] for m in b]
    if strategy == "sliding_window":
        assert kept <= window
    if strategy == "token_budget" and kept < len(bodies):
        more = request_tokens([*bodies[-kept - 1], *body], counter="heuristic")
        assert more + request_tokens([prepared.messages[0]], counter="heuristic") - 3 > (
            budget - reserve
        )


# -- the pod loop on every backend ---------------------------------------------------------------


def call_model(server: ChatServer, request: dict[str, Any]) -> dict[str, Any]:
    """POST a chat-completions request to the stub server, as an SDK would."""
    body = json.dumps({"model": "stub", **request}).encode()
    sent = urllib.request.Request(
        f"{server.url}/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(sent, timeout=10) as response:
        reply: dict[str, Any] = json.loads(response.read())
    return reply


def test_a_pod_loop_on_every_backend(history: Any, chat_server: ChatServer) -> None:
    """prepare_messages from a snapshot, a model call over HTTP, the reply appended, the
    evicted turns summarized, maybe_compact asked: on each backend, turn after turn."""
    chosen = manager("summary_and_tail", enable_summarization=True)
    scheduled: list[Any] = []
    history.append(Message.system(PROMPT))
    for i in range(6):
        chat_server.replies.append(Reply(body=completion(f"answer {i} " * 30)))
        question = Message.user(f"question {i} " * 30)
        prepared = chosen.prepare_messages(700, PROMPT, history.snapshot(), [question])
        reply = parse_response(call_model(chat_server, prepared.request), "openai_chat")
        history.append_many([question, reply])
        chosen.on_turn_complete(prepared.dropped, "agent-1", conversation_id="conv")
        history.maybe_compact(scheduled.append)
        sent = chat_server.requests[-1].body["messages"]
        assert sent[0]["content"].startswith(PROMPT)
        assert sent[-1] == {"role": "user", "content": question.content}
        assert prepared.diagnostics.total <= 700
    assert chosen.summaries(), "old turns were evicted and summarized"
    assert len(history) == 13
    assert scheduled == []  # far below the default compaction threshold
