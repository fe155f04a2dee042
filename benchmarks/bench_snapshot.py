"""Whole-conversation reads against the raw floor, at every size, on both traffic mixes.

Run: ``python benchmarks/bench_snapshot.py [--redis-url URL] [--sizes 10,100,1000,5000]
[--rounds N] [--markdown]``. Without ``--redis-url`` it starts its own
``redis-server`` on a free port. The floor is ``bench_peers.py``'s: each message's
chat-completions JSON in a bare list, read with ``LRANGE`` + ``json.loads`` per item.
The contestants are ``snapshot()`` (``Message`` models) and ``snapshot_openai()``
(chat-completions dicts, skipped on a version without it), on a conversation of the
same messages stored through ``append_many``. Calls are interleaved, in a new
shuffled order each round (``bench_peers.shuffled``); each cell is the median, the
ratio contestant / floor. The bytes per message are ``MEMORY USAGE`` of the list over its length.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import redis
from bench_peers import frozen_heap, shuffled
from peers import RedisHistoryStore
from traffic import Turn, flatten, realistic_turns, short_turns

from redis_history import RedisHistory
from redis_history.demo.server import server_url

WRITE_MESSAGES = 500
"""Messages filled per ``append_many``: a whole conversation is over one write's byte limit."""

MIXES: dict[str, Callable[[int], list[Turn]]] = {
    "realistic": realistic_turns,
    "short": short_turns,
}


def median_us(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Each call's median wall time (µs) over ``rounds``, interleaved in shuffled order."""
    labels = list(calls)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    warmup = max(2, rounds // 10)
    for i, order in enumerate(shuffled(labels, rounds + warmup)):
        for label in order:
            began = time.perf_counter_ns()
            calls[label]()
            elapsed = time.perf_counter_ns() - began
            if i >= warmup:
                samples[label].append(elapsed / 1000)
    return {label: statistics.median(values) for label, values in samples.items()}


def run_mix(
    client: redis.Redis, url: str, mix: str, sizes: Sequence[int], rounds: int
) -> list[dict[str, float | int | str]]:
    turns = MIXES[mix](max(sizes))
    messages = flatten(turns)
    rows: list[dict[str, float | int | str]] = []
    for n in sizes:
        conversation = f"snap-{mix}-{n}-{uuid.uuid4().hex[:8]}"
        store = RedisHistoryStore(url, conversation)
        natives = [store.prepare(m) for m in messages[:n]]
        history: RedisHistory = store.history
        for start in range(0, n, WRITE_MESSAGES):  # one write holds at most 8 MB
            history.append_many(natives[start : start + WRITE_MESSAGES])
        floor_key = f"floor:{conversation}"
        client.rpush(floor_key, *[m.wire_json().encode() for m in messages[:n]])

        def floor(key: str = floor_key) -> object:
            return [json.loads(item) for item in client.lrange(key, 0, -1)]

        calls: dict[str, Callable[[], object]] = {"floor": floor, "snapshot": history.snapshot}
        if hasattr(history, "snapshot_openai"):
            assert history.snapshot_openai() == [m.to_openai() for m in history.snapshot()]
            calls["snapshot_openai"] = history.snapshot_openai
        with frozen_heap():
            times = median_us(calls, max(5, rounds // (1 + n // 50)))
        stored = int(client.memory_usage(history.keys.msgs, samples=0) or 0)
        raw = int(client.memory_usage(floor_key, samples=0) or 0)
        rows.append(
            {
                "mix": mix,
                "n": n,
                "floor_us": times["floor"],
                "snapshot": times["snapshot"] / times["floor"],
                "snapshot_openai": times.get("snapshot_openai", float("nan")) / times["floor"],
                "bytes_per_message": stored / n,
                "floor_bytes_per_message": raw / n,
            }
        )
        store.client.close()
        client.delete(floor_key, *history.keys.all)
    return rows


def table(rows: Sequence[dict[str, float | int | str]]) -> str:
    lines = [
        "| mix | messages | floor | snapshot() | snapshot_openai() | list bytes / message |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['mix']} | {r['n']:,} | {r['floor_us']:,.0f} µs | {r['snapshot']:.2f}x "
        f"| {r['snapshot_openai']:.2f}x "
        f"| {r['bytes_per_message']:,.0f} (floor {r['floor_bytes_per_message']:,.0f}) |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis-url")
    parser.add_argument("--sizes", default="10,100,1000,5000")
    parser.add_argument("--rounds", type=int, default=2000, help="reads at 10 messages")
    parser.add_argument("--mix", action="append", choices=sorted(MIXES))
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    rows: list[dict[str, float | int | str]] = []
    with server_url(args.redis_url) as url:
        client = redis.Redis.from_url(url)
        version = client.info("server")["redis_version"]
        for mix in args.mix or list(MIXES):
            rows += run_mix(client, url, mix, sizes, args.rounds)
        client.close()
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}, "
        f"redis-server {version}; medians, interleaved\n"
    )
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
