"""The store against the raw redis-py floor, in one run against one real Redis.

Run: ``python benchmarks/bench_core.py [--redis-url URL] [--rounds N] [--json PATH]``.
Without ``--redis-url`` it starts its own ``redis-server`` on a free port. Each
row is the median of ``--rounds`` timed calls after a warm-up; the ratio is
store / floor measured in the same run, so the machine's speed cancels out.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import redis

from redis_history import Message, RedisHistory, ToolCall
from redis_history.demo.server import server_url


@dataclass
class Row:
    operation: str
    store_us: float
    floor_us: float
    floor: str
    target: str

    @property
    def ratio(self) -> float:
        return self.store_us / self.floor_us


def paired_us(
    store: Callable[[], object],
    floor: Callable[[], object],
    rounds: int,
    setup: Callable[[], object] | None = None,
) -> tuple[float, float]:
    """Median wall times (µs) of ``store`` and ``floor``, timed in alternating pairs.

    Each round times both calls back to back, swapping which goes first, so
    that a noisy neighbour or a frequency change hits both sides alike.
    ``setup`` runs untimed before every timed call. The first rounds warm up.
    """
    warmup = max(3, rounds // 10)
    samples: dict[int, list[float]] = {0: [], 1: []}
    calls = (store, floor)
    for i in range(rounds + warmup):
        for side in (i % 2, 1 - i % 2):
            if setup is not None:
                setup()
            began = time.perf_counter_ns()
            calls[side]()
            elapsed = time.perf_counter_ns() - began
            if i >= warmup:
                samples[side].append(elapsed / 1000)
    return statistics.median(samples[0]), statistics.median(samples[1])


def conversation(n: int) -> list[Message]:
    """``n`` realistic messages: turns of question, tool call, tool result, answer."""
    out: list[Message] = []
    i = 0
    while len(out) < n:
        out += [
            Message.user(f"Turn {i}: compare the fares from Lisbon to Osaka next week " * 3),
            Message.assistant(
                "",
                tool_calls=[
                    ToolCall(id=f"c{i}", name="fares", arguments={"from": "LIS", "to": "KIX"})
                ],
            ),
            Message.tool('{"fares": [812, 790, 1010], "currency": "EUR"}', tool_call_id=f"c{i}"),
            Message.assistant(
                "The cheapest fare is 790 EUR on Tuesday, with one stop. " * 3,
                metadata={"model": "x"},
            ),
        ]
        i += 1
    return out[:n]


def filled(client: redis.Redis, name: str, n: int) -> tuple[RedisHistory, str]:
    """A history of ``n`` messages, and a raw list key holding the same message JSON."""
    history = RedisHistory(client, name, token_counter="heuristic")
    messages = conversation(n)
    history.replace(messages)
    raw_key = f"bench:raw:{name}"
    client.delete(raw_key)
    client.rpush(raw_key, *[m.model_dump_json() for m in messages])
    return history, raw_key


def bench_append(client: redis.Redis, rounds: int, counter: str) -> tuple[float, float]:
    history = RedisHistory(client, f"append-{counter}", token_counter=counter)
    history.delete()
    # Every append is a new message (a new id): a message appended twice is stored once, and
    # timing such replays would measure the exactly-once check instead of the append.
    warmup = max(3, rounds // 10)
    texts = ["What is the weather in Lisbon tomorrow morning?", "Sunny, 21 °C."]
    messages = iter(
        [
            Message(role=("user", "assistant")[i % 2], content=texts[i % 2])
            for i in range(2 * (rounds + warmup) + 2)
        ]
    )

    def append() -> None:
        history.append(next(messages))

    body = Message.user(texts[0]).model_dump_json()
    return paired_us(append, lambda: client.rpush("bench:raw:append", body), rounds)


def raw_snapshot(client: redis.Redis, key: str) -> list[object]:
    """The floor for a snapshot: one LRANGE and json.loads per item."""
    return [json.loads(item) for item in client.lrange(key, 0, -1)]


def run(client: redis.Redis, rounds: int) -> list[Row]:
    rows: list[Row] = []
    store, floor = bench_append(client, rounds, "heuristic")
    rows.append(Row("append (heuristic counter)", store, floor, "RPUSH", "<= 1.3x"))
    store, floor = bench_append(client, rounds, "o200k_base")
    rows.append(Row("append (exact o200k counter)", store, floor, "RPUSH", "informational"))

    for n in (10, 100, 1000, 5000):
        history, raw_key = filled(client, f"snap-{n}", n)
        reps = max(10, rounds // (1 + n // 200))
        store, floor = paired_us(
            history.snapshot, functools.partial(raw_snapshot, client, raw_key), reps
        )
        rows.append(
            Row(f"snapshot, {n} messages", store, floor, "LRANGE + json.loads", "<= 1.5x at 1000")
        )

    for n in (10, 10_000):
        history, _ = filled(client, f"est-{n}", n)
        history.record_input_tokens(1234)
        floor_call = functools.partial(client.hget, history.keys.meta, "total")
        store, floor = paired_us(history.token_estimate, floor_call, rounds)
        rows.append(Row(f"token_estimate, {n} messages", store, floor, "HGET", "flat in length"))

    history, raw_key = filled(client, "splice", 1000)
    messages = conversation(1000)
    summary = Message.user("Previously: fares were compared.")
    pipe_floor = client.pipeline(transaction=False)

    def refill() -> None:
        history.replace(messages)
        client.delete(raw_key)
        client.rpush(raw_key, *[m.model_dump_json() for m in messages])

    def raw_splice() -> None:
        pipe_floor.ltrim(raw_key, 50, -1)
        pipe_floor.lpush(raw_key, summary.model_dump_json())
        pipe_floor.execute()

    reps = max(10, rounds // 20)
    store, floor = paired_us(
        lambda: history.splice_prefix(50, summary), raw_splice, reps, setup=refill
    )
    rows.append(
        Row("splice_prefix 50 of 1000", store, floor, "LTRIM + LPUSH pipeline", "informational")
    )
    store, floor = paired_us(
        lambda: history.truncate(998), lambda: client.ltrim(raw_key, 0, 997), reps, setup=refill
    )
    rows.append(Row("truncate to 998 of 1000", store, floor, "LTRIM", "informational"))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| operation | store (µs) | floor (µs) | floor | ratio | target |",
        "|---|---:|---:|---|---:|---|",
    ]
    lines += [
        f"| {r.operation} | {r.store_us:.1f} | {r.floor_us:.1f} | {r.floor} "
        f"| {r.ratio:.2f}x | {r.target} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis-url")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args()
    with server_url(args.redis_url) as url:
        client = redis.Redis.from_url(url)
        version = client.info("server")["redis_version"]
        rows = run(client, args.rounds)
        client.close()
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}, "
        f"redis-server {version}, median of {args.rounds} rounds (fewer for big lists)\n"
    )
    print(table(rows))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([{**asdict(r), "ratio": r.ratio} for r in rows], out, indent=2)


if __name__ == "__main__":
    main()
