"""How close ``fit_to_budget``'s prices are to tiktoken's count of the request it fitted, per
kind of text, and how long fitting a 128k-token history takes.

Run: ``python benchmarks/bench_budget.py [--quick] [--seeds N] [--messages M] [--json PATH]``.

**Accuracy.** For each category of the held-out corpus (``heldout.py``: code, JSON and tool
output, CJK, emoji, short chat, mixed histories) and each seed, a conversation of ``M``
messages after a system prompt is fitted to 20 budgets (5% to 100% of its price) with each
counter: the default (``fit_to_budget(counter=None)``) and each named one. The fitted list's
price (``request_tokens`` with that counter) is compared with the reference: the list rendered
as a chat-completions request (``render(..., "openai_chat")``) and counted with tiktoken's
``o200k_base`` by OpenAI's cookbook recipe (:func:`cookbook_tokens`), written here apart from
the library's pricing. Per category and counter: the signed relative error of each request,
its most negative (worst under), most positive (worst over) and median, and whether every
request is within the bounds asked of the default: at most 1% under, at most 3% over.

**Time.** A mixed history of at least 128,000 tokens (by the reference) is encoded as the
store stores it, and every timed fit gets a fresh read of it (``decode_messages``, what
``history.snapshot()`` does with what Redis returns: new ``Message`` objects, equal to the
old ones, and new strings). The first fit with the default counter is "cold" (no text of it
counted before in this process; building the encoding, once per process, is timed apart);
later fits are "warm". The budget is twice the history's price, so that every message is
priced (and kept) whatever the counter. The estimate is timed the same way, for comparison.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from heldout import CATEGORIES, SYSTEM_PROMPT, conversation, turns
from traffic import flatten, varied_turns

from redis_history import BudgetExceededError, Message, ToolCall
from redis_history.context import fit_to_budget, render, request_tokens
from redis_history.limits import MAX_MESSAGE_BYTES
from redis_history.store.codec import decode_messages, encode_message
from redis_history.tokens import TiktokenCounter, resolve_counter

COUNTERS: tuple[str | None, ...] = (None, "o200k_base", "estimate", "heuristic")
"""``None`` is the default: what ``fit_to_budget`` prices with when given no counter."""
UNDER, OVER = -0.01, 0.03
"""The bounds asked of the default counter, as signed relative errors."""
STEPS = 20
WINDOW = 128_000
_started = time.perf_counter()
_ENCODING = TiktokenCounter("o200k_base").encoding
BUILD_MS = (time.perf_counter() - _started) * 1e3
"""How long building ``o200k_base`` took at import (once per process; 0 if already built)."""


def label(counter: str | None) -> str:
    return "default" if counter is None else counter


def reference_tokens(text: str) -> int:
    return len(_ENCODING.encode(text, disallowed_special=()))


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
                    tokens += reference_tokens(json.dumps(call["function"], ensure_ascii=False))
                continue
            tokens += reference_tokens(value)
            if key == "name":
                tokens += 1
    return tokens


def reference(messages: Sequence[Message]) -> int:
    """The reference count of ``messages`` as a chat-completions request."""
    return cookbook_tokens(render(messages, "openai_chat"))


def varied_messages(n: int, seed: int) -> list[Message]:
    """A system prompt, then ``n`` seeded messages of ``traffic.py``'s realistic mix with emoji
    (the traffic the estimate was fitted on; ``tests/test_budget.py`` uses it)."""
    out = [Message.system("You are a travel agent. Answer briefly; cite tool results.")]
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


def budgets(messages: Sequence[Message], steps: int = STEPS) -> list[int]:
    """``steps`` budgets from 1/steps of the conversation's reference price to all of it."""
    total = reference(messages)
    return [total * i // steps for i in range(1, steps + 1)]


def errors(messages: Sequence[Message], counter: str | None) -> list[float]:
    """The signed relative error of each fitted request's price against the reference."""
    out = []
    for budget in budgets(messages):
        try:
            fitted = fit_to_budget(messages, budget, counter=counter)
        except BudgetExceededError:
            continue  # the current turn alone is over the smallest budgets
        expected = reference(fitted)
        out.append((request_tokens(fitted, counter=counter) - expected) / expected)
    return out


def summary(signed: Sequence[float]) -> dict[str, float]:
    """Worst under, worst over and median of signed errors, and whether all are in bounds."""
    return {
        "requests": len(signed),
        "worst_under": min(signed),
        "worst_over": max(signed),
        "median": statistics.median(signed),
        "within": float(min(signed) >= UNDER and max(signed) <= OVER),
    }


def accuracy(
    seeds: int, messages: int, counters: Sequence[str | None] = COUNTERS
) -> dict[str, dict[str, dict[str, float]]]:
    """Per category, per counter: :func:`summary` of every fitted request of every seed."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for category in CATEGORIES:
        conversations = [conversation(category, seed, messages) for seed in range(1, seeds + 1)]
        results[category] = {
            label(counter): summary([e for c in conversations for e in errors(c, counter)])
            for counter in counters
        }
    return results


def history_of(tokens: int, seed: int = 1_000) -> list[Message]:
    """Whole mixed turns after the system prompt, until the reference price is ``tokens``
    or more (priced here, not by the library, whose counts this must not warm)."""
    out = [Message.system(SYSTEM_PROMPT)]
    total = reference(out)
    for turn in turns("mixed", seed):
        if total >= tokens:
            break
        out += turn
        total += reference(turn) - reference([])  # the reply priming is counted once
    return out


def timing(tokens: int, repeats: int) -> dict[str, float]:
    """Milliseconds a fit of a ``tokens``-token history takes: the default counter's first
    call and later ones, and the estimate's, each on a fresh read of the history."""
    history = history_of(tokens)
    estimate = resolve_counter("estimate")
    stored = [encode_message(m, estimate, MAX_MESSAGE_BYTES)[0] for m in history]
    tokens = reference(history)
    budget = 2 * tokens  # every turn is priced and kept, whatever the counter's error

    def fit(counter: str | None) -> float:
        messages = decode_messages(stored)  # a fresh read, untimed
        start = time.perf_counter()
        fitted = fit_to_budget(messages, budget, counter=counter)
        elapsed = time.perf_counter() - start
        assert len(fitted) == len(history), "the whole history fits twice its price"
        return elapsed * 1e3

    cold = fit(None)
    warm = [fit(None) for _ in range(repeats)]
    return {
        "messages": len(history),
        "characters": sum(len(m.content) for m in history),
        "tokens": tokens,
        "encoding_build_ms": BUILD_MS,
        "cold_ms": cold,
        "warm_ms": statistics.median(warm),
        "warm_max_ms": max(warm),
        "estimate_ms": statistics.median(fit("estimate") for _ in range(repeats)),
    }


def percent(value: float) -> str:
    return f"{value:+.2%}"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument(
        "--quick", action="store_true", help="1 seed of 60 messages, a 16k-token history"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    seeds, messages, tokens, repeats = args.seeds, args.messages, WINDOW, 30
    if args.quick:
        seeds, messages, tokens, repeats = 1, 60, 16_000, 3

    times = timing(tokens, repeats)  # first, so that no text of the history was counted
    results = accuracy(seeds, messages)
    print(
        f"{seeds} conversation(s) of {messages} messages per category, {STEPS} budgets each; "
        "signed error of the fitted request's price against tiktoken o200k_base (cookbook "
        f"recipe); within: every request at most {-UNDER:.0%} under and {OVER:.0%} over\n"
    )
    print("| category | counter | requests | worst under | worst over | median | within |")
    print("|---|---|---:|---:|---:|---:|---|")
    for category, rows in results.items():
        for counter, row in rows.items():
            print(
                f"| {category} | {counter} | {row['requests']:.0f} "
                f"| {percent(row['worst_under'])} | {percent(row['worst_over'])} "
                f"| {percent(row['median'])} | {'yes' if row['within'] else 'no'} |"
            )

    print(
        f"\nfit_to_budget on a mixed history of {times['messages']:.0f} messages, "
        f"{times['characters']:,.0f} characters, {times['tokens']:,.0f} tokens, "
        f"each call on a fresh read; median of {repeats} ({platform.python_version()}, "
        f"{platform.machine()})\n"
    )
    print("| encoding build (once) | cold (first fit) | warm (median) | warm (max) | estimate |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {times['encoding_build_ms']:.0f} ms | {times['cold_ms']:.1f} ms "
        f"| {times['warm_ms']:.2f} ms | {times['warm_max_ms']:.2f} ms "
        f"| {times['estimate_ms']:.2f} ms |"
    )
    out = {"accuracy": results, "timing": times}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
