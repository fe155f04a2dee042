"""How close ``fit_to_budget``'s prices are to tiktoken's count of the request it fitted.

Run: ``python benchmarks/bench_budget.py [--seeds N] [--messages M]``.

For each seed, a conversation of ``M`` messages of the realistic mix with emoji
(``traffic.varied_turns``: prose, code, CJK, JSON tool results, parallel tool calls) after a
system prompt is fitted to 20 budgets (5% to 100% of its exact price) with each counter. The
fitted list's price (``request_tokens`` with that counter) is compared with the reference:
the list rendered as a chat-completions request (``render(..., "openai_chat")``) and counted
with tiktoken's ``o200k_base`` by OpenAI's cookbook recipe (:func:`cookbook_tokens`), written
here apart from the library's pricing. The table gives the absolute relative error's median,
95th percentile and maximum, and the signed range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from traffic import flatten, varied_turns

from redis_history import BudgetExceededError, Message, ToolCall
from redis_history.context import fit_to_budget, render, request_tokens
from redis_history.tokens import TiktokenCounter

COUNTERS = ("o200k_base", "estimate", "heuristic")
SYSTEM_PROMPT = "You are a travel agent. Answer briefly; cite tool results."
_ENCODING = TiktokenCounter("o200k_base").encoding


def cookbook_tokens(request: dict[str, Any]) -> int:
    """OpenAI's cookbook count of a rendered chat-completions request with ``o200k_base``:
    3 per message, every string value, 1 more per ``name``, each tool call's ``function``
    object as the JSON it is sent as, and 3 to prime the reply."""
    tokens = 3
    for message in request["messages"]:
        tokens += 3
        for key, value in message.items():
            if value is None:
                continue
            if key == "tool_calls":
                for call in value:
                    function = json.dumps(call["function"], ensure_ascii=False)
                    tokens += len(_ENCODING.encode(function, disallowed_special=()))
                continue
            tokens += len(_ENCODING.encode(value, disallowed_special=()))
            if key == "name":
                tokens += 1
    return tokens


def varied_messages(n: int, seed: int) -> list[Message]:
    """A system prompt, then ``n`` seeded messages of the realistic mix with emoji."""
    out = [Message.system(SYSTEM_PROMPT)]
    for m in flatten(varied_turns(n, seed)):
        if m.role == "user":
            out.append(Message.user(m.content))
        elif m.role == "tool":
            assert m.tool_call_id is not None
            out.append(Message.tool(m.content, tool_call_id=m.tool_call_id))
        else:
            calls = [ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in m.tool_calls]
            out.append(Message.assistant(m.content, tool_calls=calls))
    return out


def budgets(messages: Sequence[Message], steps: int = 20) -> list[int]:
    """``steps`` budgets from 1/steps of the conversation's exact price to all of it."""
    total = request_tokens(messages, counter="o200k_base")
    return [total * i // steps for i in range(1, steps + 1)]


def errors(messages: Sequence[Message], counter: str) -> list[float]:
    """The signed relative error of each fitted request's price against the reference."""
    out = []
    for budget in budgets(messages):
        try:
            fitted = fit_to_budget(messages, budget, counter=counter)
        except BudgetExceededError:
            continue  # the current turn alone is over the smallest budgets
        reference = cookbook_tokens(render(fitted, "openai_chat"))
        out.append((request_tokens(fitted, counter=counter) - reference) / reference)
    return out


def summary(signed: Sequence[float]) -> dict[str, float]:
    absolute = sorted(abs(e) for e in signed)
    return {
        "requests": len(absolute),
        "median": statistics.median(absolute),
        "p95": absolute[min(len(absolute) - 1, int(0.95 * len(absolute)))],
        "max": absolute[-1],
        "min_signed": min(signed),
        "max_signed": max(signed),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=400)
    args = parser.parse_args(argv)
    conversations = [varied_messages(args.messages, seed) for seed in range(1, args.seeds + 1)]
    results = {
        counter: summary([e for c in conversations for e in errors(c, counter)])
        for counter in COUNTERS
    }
    print(
        f"{args.seeds} conversations of {args.messages} messages, 20 budgets each; error of "
        "the fitted request's price against tiktoken o200k_base (cookbook recipe)\n"
    )
    print("| counter | requests | median | p95 | max | signed range |")
    print("|---|---:|---:|---:|---:|---:|")
    for counter, row in results.items():
        print(
            f"| {counter} | {row['requests']:.0f} | {row['median']:.2%} | {row['p95']:.2%} "
            f"| {row['max']:.2%} | {row['min_signed']:+.2%} to {row['max_signed']:+.2%} |"
        )
    return results


if __name__ == "__main__":
    main()
