"""What the cyclic garbage collector costs whole reads: with it running, and paused around them.

Run: ``python benchmarks/bench_gc.py [--redis-url URL] [--sizes 100,1000,10000]
[--heap 0,1000000] [--rounds N] [--json PATH]``. Without ``--redis-url`` it starts
its own ``redis-server`` on a free port.

The store once paused the process-wide collector (``gc.disable()``) while it decoded
a read of 256 messages or more; it no longer touches it, since the collector belongs
to the caller's process. This measures what that pause saved. Conversations of the
realistic mix (``traffic.py``) with tool results of 2-40 KB are read whole with
``snapshot()``, ``entries()`` and ``snapshot_openai()``, each call once with the
collector as the process has it and once with it paused around the call exactly as
the store paused it (lists of 256 or more), alternately, the result dropped after
each call (a pod uses a read for one turn). ``--heap`` adds that many live container
objects to the process before the reads, standing for a pod's own heap: the collector's
full collections walk them. Each cell is the mean over the rounds (a full collection
lands on one call in several; a median would hide it): the wall time, the thread's
CPU time, and the CPU time spent inside collections (``gc.callbacks``).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from peers import to_message
from traffic import flatten, realistic_turns

from redis_history import RedisHistory
from redis_history.demo.server import server_url

PAUSE_MIN = 256
"""The shortest read the store used to decode with the collector paused."""

TOOL_BYTES = (2 * 1024, 40 * 1024)

READS = ("snapshot", "entries", "snapshot_openai")


class CollectorClock:
    """The thread CPU time spent inside the collector's runs, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.thread_time()
            return
        self.seconds += time.thread_time() - self._began
        self.full += info["generation"] == 2

    @contextmanager
    def installed(self) -> Iterator[CollectorClock]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


def paused(call: Callable[[], object], n: int) -> Callable[[], object]:
    """``call`` with the collector paused around it, as the store paused it."""

    def run() -> object:
        if n < PAUSE_MIN or not gc.isenabled():
            return call()
        gc.disable()
        try:
            return call()
        finally:
            gc.enable()

    return run


def measure(
    calls: dict[str, Callable[[], object]], rounds: int, clock: CollectorClock
) -> dict[str, dict[str, float]]:
    """Each call's mean wall time, CPU time and collector time (ms), and its full
    collections per call, over ``rounds`` alternating rounds after two warm-ups."""
    sums = {label: [0.0, 0.0, 0.0, 0.0] for label in calls}
    for i in range(rounds + 2):
        labels = list(calls) if i % 2 else list(reversed(calls))
        for label in labels:
            clock.seconds, clock.full = 0.0, 0
            wall, cpu = time.perf_counter(), time.thread_time()
            result = calls[label]()
            del result
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            if i >= 2:
                for j, value in enumerate((wall, cpu, clock.seconds, clock.full)):
                    sums[label][j] += value
    return {
        label: {
            "wall_ms": s[0] / rounds * 1e3,
            "cpu_ms": s[1] / rounds * 1e3,
            "gc_ms": s[2] / rounds * 1e3,
            "full_per_call": s[3] / rounds,
        }
        for label, s in sums.items()
    }


def run(url: str, sizes: Sequence[int], heap: int, rounds: int) -> list[dict[str, Any]]:
    """Rows for every size and read, with ``heap`` extra live objects in the process."""
    pod_heap = [[i] for i in range(heap)]  # lists: tracked by the collector, as a pod's are
    messages = [to_message(m) for m in flatten(realistic_turns(max(sizes), tool_bytes=TOOL_BYTES))]
    rows: list[dict[str, Any]] = []
    clock = CollectorClock()
    client = redis.Redis.from_url(url)
    for n in sizes:
        history = RedisHistory(client, f"gc-{n}-{uuid.uuid4().hex[:8]}")
        for start in range(0, n, 500):
            history.append_many(messages[start : min(n, start + 500)])
        gc.collect()
        calls: dict[str, Callable[[], object]] = {}
        for read in READS:
            call = getattr(history, read)
            calls[f"{read} running"] = call
            calls[f"{read} paused"] = paused(call, n)
        with clock.installed():
            times = measure(calls, max(20, rounds * 100 // n), clock)
        for read in READS:
            running, pause = times[f"{read} running"], times[f"{read} paused"]
            rows.append(
                {
                    "heap": heap,
                    "tracked": len(gc.get_objects()),
                    "n": n,
                    "read": read,
                    "running": running,
                    "paused": pause,
                    "cost": running["wall_ms"] / pause["wall_ms"],
                }
            )
        history.delete()
    client.close()
    del pod_heap
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| objects the collector tracks | messages | read | running: wall / CPU / in GC "
        "| paused: wall / CPU / in GC | full collections per call, running | running / paused |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        on, off = r["running"], r["paused"]
        lines.append(
            f"| {r['tracked']:,} | {r['n']:,} | `{r['read']}()` "
            f"| {on['wall_ms']:,.1f} / {on['cpu_ms']:,.1f} / {on['gc_ms']:,.1f} ms "
            f"| {off['wall_ms']:,.1f} / {off['cpu_ms']:,.1f} / {off['gc_ms']:,.1f} ms "
            f"| {on['full_per_call']:.2f} | {r['cost']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis-url")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--heap", default="0,1000000", help="extra live objects, one run each")
    parser.add_argument("--rounds", type=int, default=60, help="rounds at 100 messages")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    with server_url(args.redis_url) as url:
        version = redis.Redis.from_url(url).info("server")["redis_version"]
        for heap in (int(h) for h in args.heap.split(",")):
            rows += run(url, sizes, heap, args.rounds)
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}, "
        f"redis-server {version}, gc thresholds {gc.get_threshold()}; means, alternating\n"
    )
    print(table(rows))
    costs = [r["cost"] for r in rows]
    print(f"\nrunning / paused: median {statistics.median(costs):.2f}x, max {max(costs):.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
