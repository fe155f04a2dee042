"""fit_to_budget keeps the lead, the current turn and the most recent whole turns that fit,
priced as the rendered request: exactly tiktoken's cookbook count with the exact counter, the
default."""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest
from bench_runs import load_bench
from hypothesis import given, settings
from hypothesis import strategies as st
from samples import conversations

from redis_history import BudgetExceededError, HistoryError, Message, ToolCall
from redis_history.context import (
    FRAMINGS,
    HistoryManagerConfig,
    fit_to_budget,
    group_turns,
    message_price,
    render,
    request_tokens,
    to_messages,
)
from redis_history.tokens import REQUEST_COUNTER, message_tokens, resolve_counter

EXACT = resolve_counter("o200k_base")


BENCHMARK = load_bench("bench_budget")


def cookbook_tokens(request: dict[str, Any]) -> int:
    """The reference: tiktoken's o200k_base count of a rendered chat-completions request by
    OpenAI's cookbook recipe, written in the benchmark apart from the library's pricing."""
    tokens: int = BENCHMARK.cookbook_tokens(request)
    return tokens


def call(call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name="lookup", arguments=arguments)


def turn(i: int, *, tools: int = 0, size: int = 1) -> list[Message]:
    """A user message, one tool step with ``tools`` parallel calls (if any), a reply."""
    out = [Message.user(f"question {i} " * size)]
    if tools:
        ids = [f"t{i}_{k}" for k in range(tools)]
        out.append(Message.assistant("", tool_calls=[call(c, q=i) for c in ids]))
        out += [Message.tool(f"result {c} " * size, tool_call_id=c) for c in reversed(ids)]
    out.append(Message.assistant(f"answer {i} " * size))
    return out


SYSTEM = Message.system("You are a travel agent.")


def history(n: int, **kwargs: Any) -> list[Message]:
    return [SYSTEM, *(m for i in range(n) for m in turn(i, **kwargs))]


def price(messages: list[Message], **kwargs: Any) -> int:
    return request_tokens(messages, counter=EXACT, **kwargs)


# -- crafted histories ---------------------------------------------------------------------------


def test_an_empty_history_fits_as_nothing_and_a_budget_below_the_priming_raises() -> None:
    """No messages cost only the reply priming; a budget below it cannot hold even that."""
    assert fit_to_budget([], 3, counter=EXACT) == []
    with pytest.raises(BudgetExceededError) as raised:
        fit_to_budget([], 2, counter=EXACT)
    assert (raised.value.budget, raised.value.required) == (2, 3)


def test_a_system_message_alone_is_kept() -> None:
    """A history of just its system prompt is kept whole when it fits, refused when it doesn't."""
    need = price([SYSTEM])
    assert fit_to_budget([SYSTEM], need, counter=EXACT) == [SYSTEM]
    with pytest.raises(BudgetExceededError) as raised:
        fit_to_budget([SYSTEM], need - 1, counter=EXACT)
    assert raised.value.parts["system"] == need - FRAMINGS["openai_chat"].request


def test_everything_is_kept_when_it_fits() -> None:
    """A budget the whole history fits drops nothing."""
    messages = history(5, tools=2)
    assert fit_to_budget(messages, price(messages), counter=EXACT) == messages


def test_a_budget_exactly_met_keeps_the_turn_that_fills_it() -> None:
    """A budget equal to the lead and the last three turns keeps exactly them; one token
    less keeps two."""
    turns = [turn(i, tools=1) for i in range(6)]
    messages = [SYSTEM, *(m for t in turns for m in t)]
    three = [SYSTEM, *(m for t in turns[3:] for m in t)]
    assert fit_to_budget(messages, price(three), counter=EXACT) == three
    two = [SYSTEM, *(m for t in turns[4:] for m in t)]
    assert fit_to_budget(messages, price(three) - 1, counter=EXACT) == two


def test_a_pair_at_the_cut_goes_with_its_whole_turn() -> None:
    """When the budget ends inside a turn, between a call and its large result, the whole turn
    goes: the result list never holds a call without its result or a result without its call."""
    turns = [turn(i, tools=1, size=50) for i in range(4)]
    messages = [SYSTEM, *(m for t in turns for m in t)]
    tail = [SYSTEM, *turns[3]]
    partial = [*tail[:1], *turns[2][-2:], *turns[3]]  # the result and reply of turn 2 only
    budget = price(partial)
    assert price(tail) < budget < price([SYSTEM, *turns[2], *turns[3]])
    fitted = fit_to_budget(messages, budget, counter=EXACT)
    assert fitted == tail
    assert to_messages(group_turns(fitted)) == fitted


def test_parallel_calls_are_kept_or_dropped_together() -> None:
    """A step with three parallel calls answered out of order is one unit."""
    messages = history(5, tools=3, size=20)
    for budget in range(price([SYSTEM, *turn(4, tools=3, size=20)]), price(messages), 97):
        fitted = fit_to_budget(messages, budget, counter=EXACT)
        calls = {c.id for m in fitted for c in m.tool_calls}
        results = {m.tool_call_id for m in fitted if m.role == "tool"}
        assert calls == results
        assert len(calls) % 3 == 0


def test_the_current_turn_is_kept_whole_mid_tool_loop() -> None:
    """A current turn that ends in tool results (the model is called again) is never cut, and
    older turns go first."""
    current = [
        Message.user("book it"),
        Message.assistant("", tool_calls=[call("b1", seat="2A"), call("b2", seat="2B")]),
        Message.tool("ok", tool_call_id="b2"),
        Message.tool("ok", tool_call_id="b1"),
    ]
    messages = [*history(3), *current]
    assert fit_to_budget(messages, price([SYSTEM, *current]), counter=EXACT) == [
        SYSTEM,
        *current,
    ]


def test_an_impossible_budget_raises_with_every_part() -> None:
    """When the lead, the current turn and the reserve alone do not fit, the error says by how
    much, part by part; it is a ValueError and a HistoryError."""
    messages = history(3, size=30)
    current = messages[-2:]
    with pytest.raises(BudgetExceededError) as raised:
        fit_to_budget(messages, 50, reserve=100, counter=EXACT)
    error = raised.value
    assert isinstance(error, ValueError)
    assert isinstance(error, HistoryError)
    assert error.parts == {
        "request": 3,
        "system": price([SYSTEM]) - 3,
        "current_turn": price(current) - 3,
        "reserve": 100,
    }
    assert error.required == sum(error.parts.values())
    assert error.budget == 50
    assert f"{error.required} needed" in str(error)
    assert "budget of 50 tokens" in str(error)


def test_the_reserve_and_a_system_prompt_are_paid_for() -> None:
    """``reserve`` tokens stay free, and a prompt sent before the messages is priced."""
    messages = history(8, tools=1, size=5)
    budget = price(messages) // 2
    plain = fit_to_budget(messages, budget, counter=EXACT)
    reserved = fit_to_budget(messages, budget, reserve=budget // 3, counter=EXACT)
    prompted = fit_to_budget(messages, budget, counter=EXACT, system_prompt="Be brief. " * 30)
    assert len(reserved) < len(plain)
    assert len(prompted) < len(plain)
    assert price(reserved) + budget // 3 <= budget
    assert price(prompted, system_prompt="Be brief. " * 30) <= budget


def test_bad_arguments_are_refused() -> None:
    """A negative budget or reserve, or an unknown format, is a ValueError."""
    with pytest.raises(ValueError, match="budget"):
        fit_to_budget([], -1)
    with pytest.raises(ValueError, match="reserve"):
        fit_to_budget([], 10, reserve=-1)
    with pytest.raises(ValueError, match="unknown wire format"):
        fit_to_budget([], 10, format="gemini")  # type: ignore[arg-type]


def test_prices_are_the_store_prices_but_for_tool_calls() -> None:
    """A message without tool calls costs what the store records for it
    (``message_tokens``); a tool call costs its function JSON as sent."""
    plain = [
        SYSTEM,
        Message.user("hi 😀 こんにちは", name="ana"),
        Message.assistant("hello"),
        Message.tool("{}", tool_call_id="c1"),
    ]
    for message in plain:
        if message.role != "tool":
            assert message_price(message, counter=EXACT) == message_tokens(message, EXACT)
    caller = Message.assistant("", tool_calls=[call("c1", city="Lisbon")])
    function = json.dumps(caller.to_openai()["tool_calls"][0]["function"], ensure_ascii=False)
    assert message_price(caller, counter=EXACT) == 3 + 1 + EXACT.count(function)


def test_formats_without_names_do_not_price_them() -> None:
    """The Responses API and Anthropic drop a message's name, so it costs nothing there."""
    named = Message.user("hi", name="a-rather-long-participant-name")
    plain = Message.user("hi")
    for format in ("openai_responses", "anthropic"):
        assert message_price(named, format, EXACT) == message_price(plain, format, EXACT)
    assert message_price(named, "openai_chat", EXACT) > message_price(plain, "openai_chat", EXACT)


# -- accuracy on varied traffic ------------------------------------------------------------------


@pytest.fixture(scope="module")
def varied() -> list[Message]:
    messages: list[Message] = BENCHMARK.varied_messages(400, seed=5)
    kinds = {"code": "```", "cjk": "的", "emoji": "😀", "json": '{"ok"'}
    for kind, marker in kinds.items():
        assert any(marker in m.content for m in messages), kind
    return messages


def budgets(messages: list[Message]) -> list[int]:
    steps: list[int] = BENCHMARK.budgets(messages)
    return steps


def test_fitted_prices_are_tiktokens_count_of_the_rendered_request(varied: list[Message]) -> None:
    """With the exact counter, the price of every fitted request (20 budgets over 400 varied
    messages) is the cookbook count of it rendered in the chat format, token for token, and
    within the budget; well inside the 2% asked for."""
    for budget in budgets(varied):
        fitted = fit_to_budget(varied, budget, counter=EXACT)
        counted = cookbook_tokens(render(fitted, "openai_chat"))
        assert request_tokens(fitted, counter=EXACT) == counted
        assert counted <= budget
        assert len(fitted) > 1


def test_the_estimate_prices_fitted_requests_within_a_few_percent(
    varied: list[Message],
) -> None:
    """With the estimating counter, fitted requests of the traffic its weights were fitted
    on are priced within 3.5% of the exact count, and within 1% in the median."""
    errors = []
    for budget in budgets(varied):
        fitted = fit_to_budget(varied, budget, counter="estimate")
        counted = cookbook_tokens(render(fitted, "openai_chat"))
        errors.append(abs(request_tokens(fitted, counter="estimate") - counted) / counted)
    assert max(errors) <= 0.035
    assert statistics.median(errors) <= 0.01


def test_the_default_prices_every_kind_of_text_within_the_bounds() -> None:
    """Given no counter, no request fitted from the held-out corpus (code, tool output, CJK,
    emoji, short chat, mixed histories) is priced more than 1% under tiktoken's count of it,
    nor more than 3% over: a fitted request never holds more than the budget."""
    results = BENCHMARK.accuracy(seeds=1, messages=60, counters=(None,))
    assert set(results) == {"code", "json", "cjk", "emoji", "short_chat", "mixed"}
    for category, rows in results.items():
        row = rows["default"]
        assert row["requests"] >= 10, category
        assert row["worst_under"] >= -0.01, (category, row)
        assert row["worst_over"] <= 0.03, (category, row)


def test_requests_are_priced_exactly_unless_a_counter_is_given(varied: list[Message]) -> None:
    """fit_to_budget, request_tokens and message_price price with the exact counter when
    given none, as a default HistoryManager does; a history's own default stays the estimate."""
    assert HistoryManagerConfig().token_counter == REQUEST_COUNTER == "o200k_base"
    assert request_tokens(varied) == request_tokens(varied, counter=EXACT)
    assert request_tokens(varied) != request_tokens(varied, counter="estimate")
    assert [message_price(m) for m in varied] == [message_price(m, counter=EXACT) for m in varied]
    budget = budgets(varied)[3]
    assert fit_to_budget(varied, budget) == fit_to_budget(varied, budget, counter=EXACT)
    assert resolve_counter(None).name == "estimate"


def test_the_benchmark_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """``bench_budget.py --quick`` runs and prints a row per category and counter, the exact
    counter exact on every one, and the fit's timing."""
    results = BENCHMARK.main(["--quick"])
    printed = capsys.readouterr().out
    for category in BENCHMARK.CATEGORIES:
        for counter in ("default", "o200k_base", "estimate", "heuristic"):
            assert f"| {category} | {counter} |" in printed
        exact = results["accuracy"][category]["o200k_base"]
        assert exact["requests"] >= 10
        assert exact["worst_under"] == exact["worst_over"] == 0
    assert "| encoding build (once) | cold (first fit) |" in printed
    assert results["timing"]["tokens"] >= 16_000


def test_the_held_out_corpus_is_seeded_and_holds_its_kind_of_text() -> None:
    """A category and a seed always give the same conversation, a valid one (whole turns
    after a system prompt), holding the kind of text its category names."""
    markers = {
        "code": "def ",
        "json": '":',
        "cjk": "。",
        "emoji": "\u200d",
        "short_chat": "thanks",
        "mixed": "```python",
    }
    for category in BENCHMARK.CATEGORIES:
        one = BENCHMARK.conversation(category, 1, 40)
        assert [m.model_dump(exclude={"id", "created_at"}) for m in one] == [
            m.model_dump(exclude={"id", "created_at"})
            for m in BENCHMARK.conversation(category, 1, 40)
        ]
        assert len(one) > 40
        assert one[0].role == "system"
        group_turns(one)
        text = "\n".join([m.content for m in one] + [c.name for m in one for c in m.tool_calls])
        assert markers[category] in text, category


# -- properties ----------------------------------------------------------------------------------

HEURISTIC = resolve_counter("heuristic")


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(0, 3000), st.integers(0, 200))
def test_the_fit_is_the_lead_and_the_longest_suffix_of_whole_turns_that_fits(
    messages: list[Message], budget: int, reserve: int
) -> None:
    """Whatever the history and budget: either the lead, the current turn and the reserve do
    not fit and it raises with the numbers, or the result is the lead plus a suffix of whole
    turns ending with the current one, it fits, and one more older turn would not."""
    turns = group_turns(messages)
    lead = list(turns[0].lead) if turns else []
    bodies = [t.to_messages()[len(t.lead) :] for t in turns]
    bodies = [b for b in bodies if b]

    def cost(kept: int) -> int:
        chosen = [m for b in bodies[len(bodies) - kept :] for m in b] if kept else []
        return request_tokens([*lead, *chosen], counter=HEURISTIC) + reserve

    least = cost(min(1, len(bodies)))
    if least > budget:
        with pytest.raises(BudgetExceededError) as raised:
            fit_to_budget(messages, budget, reserve=reserve, counter=HEURISTIC)
        assert raised.value.required == least
        return
    fitted = fit_to_budget(messages, budget, reserve=reserve, counter=HEURISTIC)
    kept = next(k for k in range(len(bodies) + 1) if to_messages_of(lead, bodies, k) == fitted)
    assert kept >= min(1, len(bodies))
    assert cost(kept) <= budget
    assert kept == len(bodies) or cost(kept + 1) > budget
    assert to_messages(group_turns(fitted)) == fitted


def to_messages_of(lead: list[Message], bodies: list[list[Message]], kept: int) -> list[Message]:
    return [*lead, *(m for b in bodies[len(bodies) - kept :] for m in b)] if kept else lead
