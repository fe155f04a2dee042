"""How far ``token_estimate()`` is from the exact prompt count, through a real store.

Run: ``python benchmarks/bench_estimate.py [--conversations N] [--turns T] [--quick]
[--redis-url URL] [--json PATH]``. Without ``--redis-url`` it starts its own
``redis-server`` on a free port.

Each conversation is seeded agent traffic (``traffic.py``) driven through a
``RedisHistory`` the way an agent loop writes it: the user message is appended;
before each assistant message the "LLM" is called, and at that call the store's
``token_estimate()`` is compared with the reference; then the LLM's input tokens
are reported with ``record_input_tokens`` (on the calls the configuration
reports on), and the assistant message and its tool results are appended.

The LLM's input tokens are the exact ``o200k_base`` price of every stored
message (``message_tokens`` with the exact counter: the framing the store
prices with) plus a fixed :data:`OVERHEAD` for a system prompt and tool schemas
kept outside the history. The reference is what the estimate stands for (the
History contract): once a baseline was reported, the prompt the next call
sends, overhead included; before that, the exact price of the stored messages
(the store cannot know the overhead before any report).

The error of a call is ``|estimate - reference| / reference``; the table gives
its median, 95th percentile and maximum over every LLM call of every
conversation, the mean signed error (the bias), and the 95th percentile and
maximum over the calls made while a reported baseline stood (the calls before
a conversation's first report are priced by the counter alone).

"Calibrated (simulated)" rows measure a per-conversation calibration that the
store does not ship: between two consecutive reports, the reported growth over
the estimated growth (the fixed overhead cancels out), clamped to [0.5, 2] and
averaged weighted by tokens, applied to the tokens appended since the last
report. It is computed here on the client from the same store's meta hash, so
the comparison is like for like. It did not help measurably on these mixes
(docs/benchmarks.md), which is why it is not in the store.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import to_message
from traffic import Turn, flatten, realistic_turns, short_turns

from redis_history import Message, RedisHistory
from redis_history.demo.server import server_url
from redis_history.tokens import TokenCounter, message_tokens, resolve_counter

OVERHEAD = 1200
"""Prompt tokens outside the history on every LLM call: a system prompt and tool schemas."""

EXACT = resolve_counter("o200k_base")


@dataclass(frozen=True)
class Config:
    """A counter and how often the LLM's input tokens are reported."""

    label: str
    counter: str
    every: int
    """Report on every ``every``-th LLM call of a conversation; 0: never."""


CONFIGS = (
    Config("exact `o200k_base`, no baseline", "o200k_base", 0),
    Config("estimate (default), no baseline", "estimate", 0),
    Config("estimate, baseline every LLM call", "estimate", 1),
    Config("estimate, baseline every 5th LLM call", "estimate", 5),
    Config("heuristic, no baseline", "heuristic", 0),
    Config("heuristic, baseline every LLM call", "heuristic", 1),
)


@dataclass
class Errors:
    """Signed relative errors, one per LLM call, and whether a reported baseline stood."""

    label: str
    signed: list[float] = field(default_factory=list)
    standing: list[bool] = field(default_factory=list)

    def add(self, estimate: int, reference: int, standing: bool) -> None:
        self.signed.append((estimate - reference) / reference)
        self.standing.append(standing)

    def summary(self) -> dict[str, Any]:
        absolute = sorted(abs(e) for e in self.signed)
        after = sorted(abs(e) for e, s in zip(self.signed, self.standing, strict=True) if s)
        return {
            "label": self.label,
            "calls": len(absolute),
            "median": statistics.median(absolute),
            "p95": _p95(absolute),
            "max": absolute[-1],
            "bias": statistics.fmean(self.signed),
            "standing_calls": len(after),
            "standing_p95": _p95(after) if after else None,
            "standing_max": after[-1] if after else None,
        }


def _p95(ordered: Sequence[float]) -> float:
    return ordered[round(0.95 * (len(ordered) - 1))]


CAL_LOW, CAL_HIGH, CAL_MIN, CAL_PRIOR, CAL_WEIGHT = 0.5, 2.0, 16, 500, 20_000
"""The simulated calibration: sample clamp, least growth measured, the weight of the
starting ratio of 1, and the cap on the weight of the evidence (in estimated tokens)."""


@dataclass
class Calibration:
    """A per-conversation correction of the estimate, learned from consecutive reports."""

    ratio: float = 1.0
    weight: float = CAL_PRIOR

    def learn(self, grown: int, counted: int) -> None:
        """Reports ``grown`` tokens apart, with ``counted`` estimated tokens appended between."""
        if counted < CAL_MIN or grown <= 0:
            return
        sample = min(max(grown / counted, CAL_LOW), CAL_HIGH)
        self.ratio = (self.weight * self.ratio + counted * sample) / (self.weight + counted)
        self.weight = min(self.weight + counted, CAL_WEIGHT)


def meta_fields(client: redis.Redis, history: RedisHistory) -> tuple[int, int | None, int]:
    """``total``, ``baseline`` and ``mark`` from the conversation's meta hash."""
    total, baseline, mark = client.hmget(history.keys.meta, "total", "baseline", "mark")
    return int(total or 0), None if baseline is None else int(baseline), int(mark or 0)


@dataclass
class Sinks:
    """Where one configuration's errors go: the store's estimate, and the simulated one."""

    store: Errors
    calibrated: Errors


def run_conversation(
    client: redis.Redis, name: str, turns: Sequence[Turn], config: Config, sinks: Sinks
) -> None:
    """Drive one conversation through the store, measuring at every LLM call."""
    history = RedisHistory(client, name, token_counter=config.counter)
    history.delete()
    calibration = Calibration()
    exact = 0
    reported: int | None = None
    calls = 0
    for turn in turns:
        for msg in turn:
            message = to_message(msg)
            if msg.role == "assistant":  # the LLM is called on what is stored so far
                standing = reported is not None
                reference = exact + (OVERHEAD if standing else 0)
                estimate = history.token_estimate()
                assert estimate is not None
                sinks.store.add(estimate, reference, standing)
                total, baseline, mark = meta_fields(client, history)
                assert estimate == (total if baseline is None else baseline + total - mark)
                if baseline is not None:
                    estimate = baseline + round(calibration.ratio * (total - mark))
                sinks.calibrated.add(estimate, reference, standing)
                calls += 1
                if config.every and calls % config.every == 0:
                    if baseline is not None:
                        calibration.learn(exact + OVERHEAD - baseline, total - mark)
                    reported = exact + OVERHEAD
                    history.record_input_tokens(reported)
            history.append(message)
            exact += message_tokens(message, EXACT)


def measure(client: redis.Redis, mix: str, conversations: list[list[Turn]]) -> list[dict[str, Any]]:
    """Every configuration's error summaries on ``conversations``."""
    rows: list[dict[str, Any]] = []
    for config in CONFIGS:
        sinks = Sinks(Errors(config.label), Errors(config.label + " + calibration (simulated)"))
        for i, turns in enumerate(conversations):
            name = f"estimate-{mix}-{config.counter}-{i}"
            run_conversation(client, name, turns, config, sinks)
        rows.append({**sinks.store.summary(), "mix": mix})
        if config.every and config.counter == "estimate":
            rows.append({**sinks.calibrated.summary(), "mix": mix})
    return rows


def counter_costs(mix: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Per message: each counter's time for ``message_tokens`` and its error against exact."""
    exact = [message_tokens(m, EXACT) for m in messages]
    rows = []
    for spec in ("o200k_base", "estimate", "heuristic"):
        counter: TokenCounter = resolve_counter(spec)
        times = []
        prices = []
        for message in messages:
            began = time.perf_counter_ns()
            price = message_tokens(message, counter)
            times.append((time.perf_counter_ns() - began) / 1000)
            prices.append(price)
        errors = sorted(abs(p - e) / e for p, e in zip(prices, exact, strict=True))
        rows.append(
            {
                "mix": mix,
                "counter": spec,
                "mean_us": statistics.fmean(times),
                "median_us": statistics.median(times),
                "median": statistics.median(errors),
                "p95": _p95(errors),
                "sum": sum(prices) / sum(exact) - 1,
            }
        )
    return rows


def error_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| mix | configuration | LLM calls | median | p95 | max | bias "
        "| p95, baseline standing | max, baseline standing |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        standing = (
            f"{r['standing_p95']:.2%} | {r['standing_max']:.2%}" if r["standing_calls"] else "- | -"
        )
        lines.append(
            f"| {r['mix']} | {r['label']} | {r['calls']} | {r['median']:.2%} | {r['p95']:.2%} "
            f"| {r['max']:.2%} | {r['bias']:+.2%} | {standing} |"
        )
    return "\n".join(lines)


def cost_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| mix | counter | µs per message, mean | median | error per message, median | p95 "
        "| sum of prices vs exact |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['mix']} | `{r['counter']}` | {r['mean_us']:.1f} | {r['median_us']:.1f} "
        f"| {r['median']:.2%} | {r['p95']:.2%} | {r['sum']:+.2%} |"
        for r in rows
    ]
    return "\n".join(lines)


def coding_turns(n_messages: int, seed: int) -> list[Turn]:
    """The realistic mix with every tool result replaced by 1-20 KB of a real Python source
    file (the standard library's, so the text is real code and comments): a coding agent
    reading files, the text the estimate prices worst."""
    rng = random.Random(seed)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    turns = []
    for turn in realistic_turns(n_messages, seed):
        out: Turn = []
        for msg in turn:
            if msg.role != "tool":
                out.append(msg)
                continue
            text = rng.choice(files).read_text(encoding="utf-8", errors="replace")
            size = round(math.exp(rng.uniform(math.log(1024), math.log(20 * 1024))))
            start = rng.randrange(max(1, len(text) - size))
            out.append(replace(msg, content=text[start : start + size] or text, kind="code"))
        turns.append(out)
    return turns


def split(
    make: Callable[[int, int], list[Turn]], conversations: int, turns: int
) -> list[list[Turn]]:
    """``conversations`` seeded conversations of ``turns`` turns each."""
    return [make(turns * 10, 100 + i)[:turns] for i in range(conversations)]


def run(client: redis.Redis, conversations: int, turns: int) -> dict[str, Any]:
    """Both mixes: the error rows and the counters' cost rows."""
    mixes = {
        "realistic": split(realistic_turns, conversations, turns),
        "coding": split(coding_turns, conversations, turns),
        "short": split(short_turns, conversations, turns),
    }
    errors: list[dict[str, Any]] = []
    costs: list[dict[str, Any]] = []
    for mix, convs in mixes.items():
        errors += measure(client, mix, convs)
        costs += counter_costs(mix, [to_message(m) for c in convs for m in flatten(c)])
    return {"errors": errors, "costs": costs}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis-url")
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--turns", type=int, default=30, help="user turns per conversation")
    parser.add_argument("--quick", action="store_true", help="4 conversations of 10 turns")
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.conversations, args.turns = 4, 10
    with server_url(args.redis_url) as url:
        client = redis.Redis.from_url(url)
        version = client.info("server")["redis_version"]
        result = run(client, args.conversations, args.turns)
        client.close()
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}, "
        f"redis-server {version}; {args.conversations} conversations of {args.turns} turns "
        f"per mix; LLM input = exact o200k_base price of the history + {OVERHEAD} tokens\n"
    )
    print(error_table(result["errors"]))
    print()
    print(cost_table(result["costs"]))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"overhead": OVERHEAD, **result, "args": vars(args)}, out, indent=2)
    return result


if __name__ == "__main__":
    main()
