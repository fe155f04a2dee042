"""redis-history against its Redis chat-history peers, each as a ratio to the raw-Redis floor.

Run from the repository root (the peers come with the ``bench`` extra)::

    python -m pip install -e ".[bench]"
    python benchmarks/bench_peers.py [--mix chat|tool-heavy|both] [--rounds N] [--repeat K]
                                     [--quick] [--only PEER] [--otel] [--markdown]
                                     [--json PATH] [--profile] [--staging] [--compression]

One ``redis-server`` (the newest on the machine) is started for the run. Every
contestant appends and reads the same seeded traffic (``traffic.py``: the chat
mix, the tool-heavy mix, or both) through its own documented API at default
settings; the floor is raw redis-py doing the least that stores the same
chat-completions JSON (``json.dumps`` of the message and ``RPUSH``, timed
together; ``LRANGE`` + ``json.loads``). Calls are interleaved, the contestants
in a new shuffled order on every round, so machine noise hits all alike;
every ratio is contestant / floor from the same run (for the 8-writer
throughput, floor / contestant), so lower is better everywhere. A peer that
cannot be imported is printed as ``skipped: <why>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import gc
import importlib
import importlib.metadata
import inspect
import io
import json
import multiprocessing
import os
import platform
import pstats
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import (
    ASYNC_FLOOR,
    COMPRESSION_VARIANTS,
    CONTESTANTS,
    FLOOR,
    LANE_FLOOR,
    MESSAGE_FLOOR,
    STAGING_VARIANTS,
    Contestant,
    RedisHistoryStore,
    Store,
    new_id,
    select,
)
from traffic import Msg, Turn, chat_turns, flatten, stats_table, tool_heavy_turns

from redis_history.demo.server import RedisServer

WRITERS = 8

MIXES: dict[str, tuple[str, Callable[[int], list[Turn]]]] = {
    "chat": ("chat mix (~600 B messages)", chat_turns),
    "tool-heavy": ("tool-heavy mix (2-40 KB tool results)", tool_heavy_turns),
}
"""``--mix``'s choices: the heading of each mix's tables, and its traffic."""
FORK = multiprocessing.get_context("fork")


# --------------------------------------------------------------------------- timing


async def timed(call: Callable[[], object]) -> float:
    """Wall time of one call in µs, awaiting it if it returned an awaitable."""
    began = time.perf_counter_ns()
    result = call()
    if inspect.isawaitable(result):
        await result
    return (time.perf_counter_ns() - began) / 1000


async def interleaved(
    calls: dict[str, Callable[[int], Callable[[], object]]], rounds: int, warmup: int
) -> dict[str, list[float]]:
    """``rounds`` timed calls of each contestant after ``warmup``, in :func:`shuffled` order.

    ``calls[label](i)`` builds (untimed) the zero-argument call of round ``i``.
    """
    labels = list(calls)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    with frozen_heap():
        for i, order in enumerate(shuffled(labels, warmup + rounds)):
            for label in order:
                elapsed = await timed(calls[label](i))
                if i >= warmup:
                    samples[label].append(elapsed)
    return samples


def shuffled(labels: Sequence[str], rounds: int, seed: int = 11) -> Iterator[list[str]]:
    """The order of each round: a new shuffle every time, seeded.

    Not a rotation: rotating one order keeps every contestant behind the same neighbour
    on every round, and what a call leaves behind (a cold CPU after a slow neighbour, a
    warm one after a quick one) then lands on the same contestant every time. Measured:
    two identical redis-history contestants, adjacent in a rotation, differed by 0.05x.
    """
    rng = random.Random(seed)
    order = list(labels)
    for _ in range(rounds):
        rng.shuffle(order)
        yield list(order)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep what the benchmark holds (prepared messages, filled stores) out of the cyclic GC.

    Without it, a full collection walks every object prepared for every contestant
    and lands as a 50-200 ms pause on whichever call is running: a cost of the
    benchmark's own heap, not of any contestant.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def every_round(call: Callable[[], object]) -> Callable[[int], Callable[[], object]]:
    """The same call on every round."""
    return lambda _: call


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100), linear between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * p / 100
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def pcts(values: Sequence[float]) -> dict[str, float]:
    return {f"p{p}": percentile(values, p) for p in (50, 90, 99)}


async def close_all(stores: dict[str, Store]) -> None:
    for store in stores.values():
        await store.aclose()


def open_stores(contestants: Sequence[Contestant], url: str, phase: str) -> dict[str, Store]:
    return {
        c.label: c.store(url, new_id(f"{c.store.__name__.lower()}-{phase}")) for c in contestants
    }


# --------------------------------------------------------------------------- phases


@dataclass
class Settings:
    rounds: int
    warmup: int
    snapshot_sizes: tuple[int, ...]
    snapshot_rounds: tuple[int, ...]
    memory_size: int
    """The snapshot size whose conversation's memory is measured (one of ``snapshot_sizes``)."""
    writer_messages: int
    writer_reps: int


async def append_phase(
    contestants: Sequence[Contestant], url: str, messages: Sequence[Msg], s: Settings
) -> dict[str, dict[str, float]]:
    """Single-writer appends, one message per call, in the traffic's order."""
    stores = open_stores([FLOOR, ASYNC_FLOOR, LANE_FLOOR, *contestants], url, "append")
    try:
        natives = {label: [st.prepare(m) for m in messages] for label, st in stores.items()}

        def call(label: str) -> Callable[[int], Callable[[], object]]:
            store, mine = stores[label], natives[label]
            return lambda i: lambda: store.append(mine[i])

        samples = await interleaved({label: call(label) for label in stores}, s.rounds, s.warmup)
    finally:
        await close_all(stores)
    return {label: pcts(values) for label, values in samples.items()}


def cut(turns: Sequence[Turn], n: int) -> list[Turn]:
    """The first ``n`` messages, as turns (the last one possibly cut short)."""
    out: list[Turn] = []
    left = n
    for turn in turns:
        if left <= 0:
            break
        out.append(list(turn[:left]))
        left -= len(out[-1])
    return out


async def fill(store: Store, turns: Sequence[Turn]) -> None:
    for turn in turns:
        result = store.append_turn([store.prepare(m) for m in turn])
        if inspect.isawaitable(result):
            await result


async def memory_per_message(
    client: redis.Redis, store: Store, n: int
) -> tuple[float, dict[str, int]]:
    """MEMORY USAGE (all samples) of every key holding the conversation's id: per message in
    all, and each key's bytes."""
    keys = sorted(k.decode() for k in client.scan_iter(match=f"*{store.conversation}*", count=1000))
    sizes = {
        key.replace(store.conversation, "<id>"): int(client.memory_usage(key, samples=0) or 0)
        for key in keys
    }
    return sum(sizes.values()) / n, sizes


async def snapshot_phase(
    contestants: Sequence[Contestant],
    url: str,
    turns: Sequence[Turn],
    s: Settings,
    client: redis.Redis,
    *,
    result: MixResult,
) -> None:
    """Reads of whole conversations of each size; memory measured on ``memory_size``
    messages, and the mean size of those messages' JSON."""
    for n, rounds in zip(s.snapshot_sizes, s.snapshot_rounds, strict=True):
        stores = open_stores([FLOOR, *contestants], url, f"snap{n}")
        try:
            part = cut(turns, n)
            for store in stores.values():
                await fill(store, part)
            if n == s.memory_size:
                result.json_bytes = statistics.fmean(
                    len(m.wire_json().encode()) for m in flatten(part)
                )
                for label, store in stores.items():
                    result.memory[label], result.keys[label] = await memory_per_message(
                        client, store, n
                    )
            samples = await interleaved(
                {label: every_round(st.snapshot) for label, st in stores.items()},
                rounds,
                max(2, rounds // 10),
            )
            result.snapshots[n] = {label: pcts(values) for label, values in samples.items()}
        finally:
            await close_all(stores)
        client.flushdb()


@dataclass
class WriterJob:
    """What one of the 8 writer processes does, and how it meets the others."""

    contestant: Contestant
    url: str
    conversation: str
    turns: list[Turn]
    warm: Turn
    """Appended before the start, so connections are open and scripts loaded."""
    ready: Any
    start: Event
    out: Any

    def __call__(self) -> None:
        try:
            self.out.put(("ok", asyncio.run(self.run())))
        except BaseException:
            self.out.put(("error", traceback.format_exc()))

    async def run(self) -> tuple[float, float, int, list[float]]:
        store = self.contestant.store(self.url, self.conversation)
        natives = [[store.prepare(m) for m in turn] for turn in self.turns]
        await timed(functools.partial(store.append_turn, [store.prepare(m) for m in self.warm]))
        gc.collect()
        gc.freeze()
        self.ready.release()
        self.start.wait()
        began = time.perf_counter()
        latencies = [await timed(functools.partial(store.append_turn, t)) for t in natives]
        ended = time.perf_counter()
        await store.aclose()
        return began, ended, sum(len(t) for t in self.turns), latencies


def writers_run(
    contestant: Contestant, url: str, turns: Sequence[Turn], per_writer: int
) -> dict[str, float]:
    """8 processes behind one start event, each appending its own turns to one conversation."""
    conversation = new_id(f"{contestant.store.__name__.lower()}-writers")
    per: list[list[Turn]] = [[] for _ in range(WRITERS)]
    it = iter(turns)
    warm = [next(it) for _ in range(WRITERS)]
    for w in range(WRITERS):
        while sum(len(t) for t in per[w]) < per_writer:
            per[w].append(next(it))
    ready = FORK.Semaphore(0)
    start = FORK.Event()
    out = FORK.Queue()
    procs = [
        FORK.Process(
            target=WriterJob(contestant, url, conversation, per[w], warm[w], ready, start, out)
        )
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=120):
            break
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r[1] for r in results if r[0] == "error"]
    if errors:
        raise RuntimeError(f"a writer of {contestant.label} failed:\n{errors[0]}")
    began = min(r[1][0] for r in results)
    ended = max(r[1][1] for r in results)
    messages = sum(r[1][2] for r in results)
    latencies = [x for r in results for x in r[1][3]]
    return {"throughput": messages / (ended - began), **pcts(latencies)}


def writers_phase(
    contestants: Sequence[Contestant],
    url: str,
    turns: Sequence[Turn],
    s: Settings,
    client: redis.Redis,
) -> dict[str, dict[str, float]]:
    """Each contestant's 8-writer run, ``writer_reps`` times in :func:`shuffled` order; medians.
    Both floors run: a turn in one ``RPUSH``, and one ``RPUSH`` per message."""
    everyone = {c.label: c for c in [FLOOR, MESSAGE_FLOOR, *contestants]}
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in everyone}
    for order in shuffled(list(everyone), s.writer_reps):
        for label in order:
            runs[label].append(writers_run(everyone[label], url, turns, s.writer_messages))
            client.flushdb()
    return {
        label: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for label, rs in runs.items()
    }


class Counter:
    """Counts what is sent to Redis: packets (round trips) of every redis-py connection."""

    def __init__(self) -> None:
        self.sends = 0

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        sync_cls: Any = redis.connection.AbstractConnection
        async_cls: Any = redis.asyncio.connection.AbstractConnection
        sync_send, async_send = sync_cls.send_packed_command, async_cls.send_packed_command

        def sync_wrapper(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self.sends += 1
            return sync_send(conn, *args, **kwargs)

        async def async_wrapper(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self.sends += 1
            return await async_send(conn, *args, **kwargs)

        sync_cls.send_packed_command, async_cls.send_packed_command = sync_wrapper, async_wrapper
        try:
            yield
        finally:
            sync_cls.send_packed_command, async_cls.send_packed_command = sync_send, async_send


async def per_call_phase(
    contestants: Sequence[Contestant], url: str, turns: Sequence[Turn], client: redis.Redis
) -> dict[str, dict[str, str]]:
    """Round trips and Redis commands of one append, one turn and one read, measured."""
    out: dict[str, dict[str, str]] = {}
    for c in [FLOOR, *contestants]:
        store = c.store(url, new_id("percall"))
        await fill(store, turns[:1])  # connections open, scripts loaded
        natives = [store.prepare(m) for m in flatten(turns[1:5])]
        batches = [[store.prepare(m) for m in turn] for turn in turns[5:9]]
        row: dict[str, str] = {}
        for what, calls in (
            ("append", [functools.partial(store.append, n) for n in natives]),
            ("turn", [functools.partial(store.append_turn, b) for b in batches]),
            ("snapshot", [store.snapshot]),
        ):
            client.config_resetstat()
            counter = Counter()
            with counter.counting():
                for call in calls:
                    await timed(call)
            stats = client.info("commandstats")
            commands = {
                name.removeprefix("cmdstat_"): int(v["calls"])
                for name, v in stats.items()
                if not name.startswith(("cmdstat_config", "cmdstat_info"))
            }
            n = len(calls)
            row[f"{what} round trips"] = f"{counter.sends / n:.2g}"
            row[f"{what} commands"] = ", ".join(
                f"{name.upper()} {count / n:.2g}" for name, count in sorted(commands.items())
            )
        row["messages per turn"] = f"{sum(map(len, batches)) / len(batches):.2g}"
        out[c.label] = row
        await store.aclose()
        client.flushdb()
    return out


# --------------------------------------------------------------------------- one run


@dataclass
class MixResult:
    append: dict[str, dict[str, float]] = field(default_factory=dict)
    writers: dict[str, dict[str, float]] = field(default_factory=dict)
    snapshots: dict[int, dict[str, dict[str, float]]] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    keys: dict[str, dict[str, int]] = field(default_factory=dict)
    json_bytes: float = 0.0
    """The mean size of the memory row's messages as compact UTF-8 chat-completions JSON."""


def run_mix(
    contestants: Sequence[Contestant], url: str, turns: list[Turn], s: Settings, client: redis.Redis
) -> MixResult:
    result = MixResult()
    result.writers = writers_phase(contestants, url, turns, s, client)
    messages = flatten(turns)[: s.warmup + s.rounds]

    async def latency() -> None:
        result.append = await append_phase(contestants, url, messages, s)
        client.flushdb()
        await snapshot_phase(contestants, url, turns, s, client, result=result)

    asyncio.run(latency())
    return result


# --------------------------------------------------------------------------- report


def ratio_rows(
    r: MixResult, labels: Sequence[str], sizes: Sequence[int], memory_size: int
) -> list[tuple[str, float, dict[str, float]]]:
    """(row name, floor value, ratio per contestant) for one run of one mix."""
    f = FLOOR.label
    rows = [
        (
            "append, median",
            r.append[f]["p50"],
            {x: r.append[x]["p50"] / r.append[f]["p50"] for x in labels},
        ),
        (
            "append, p99",
            r.append[f]["p99"],
            {x: r.append[x]["p99"] / r.append[f]["p99"] for x in labels},
        ),
        (
            "8 writers on one conversation, throughput (raw / store)",
            r.writers[f]["throughput"],
            {x: r.writers[f]["throughput"] / r.writers[x]["throughput"] for x in labels},
        ),
        (
            WRITERS_PER_MESSAGE_ROW,
            r.writers[MESSAGE_FLOOR.label]["throughput"],
            {
                x: r.writers[MESSAGE_FLOOR.label]["throughput"] / r.writers[x]["throughput"]
                for x in labels
            },
        ),
    ]
    for n in sizes:
        snap = r.snapshots[n]
        rows.append(
            (
                f"snapshot of {n:,}",
                snap[f]["p50"],
                {x: snap[x]["p50"] / snap[f]["p50"] for x in labels},
            )
        )
    rows.append(
        (
            f"Redis memory per message ({memory_size:,} messages)",
            r.memory[f],
            {x: r.memory[x] / r.memory[f] for x in labels},
        )
    )
    rows.append(
        (
            JSON_ROW,
            r.json_bytes,
            {x: r.memory[x] / r.json_bytes for x in [f, *labels]},
        )
    )
    return rows


def spread(values: Sequence[float], fmt: str, unit: str = "") -> str:
    """The median, and the range when there is more than one value."""
    median = format(statistics.median(values), fmt) + unit
    if len(values) == 1:
        return median
    return f"{median} ({format(min(values), fmt)}-{format(max(values), fmt)})"


WRITERS_PER_MESSAGE_ROW = "8 writers, against a floor of one RPUSH per message"
"""The 8-writer row against the floor paying the peers' round trips: one per message."""

JSON_ROW = "Redis memory per message / its JSON's bytes"
"""The memory row against the messages' own size: the floor's cell shows the JSON's mean
bytes and the floor's own ratio."""


def floor_text(row: str, value: float) -> str:
    if row == JSON_ROW:
        return f"{value:,.0f} B of JSON"
    if row.startswith("8 writers"):
        return f"{value:,.0f} msg/s"
    if row.startswith("Redis memory"):
        return f"{value:,.0f} B"
    return f"{value:,.0f} µs"


def render(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def fmt(row: Sequence[str]) -> str:
        cells = zip(row, widths, strict=True)
        return "  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(cells))

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def ratio_table(
    runs: Sequence[MixResult],
    contestants: Sequence[Contestant],
    skipped: dict[str, str],
    s: Settings,
    markdown: bool,
) -> str:
    labels = [c.label for c in contestants]
    per_run = [ratio_rows(r, labels, s.snapshot_sizes, s.memory_size) for r in runs]
    header = ["", "floor", *labels, *skipped]
    rows = []
    for i, (name, _, _) in enumerate(per_run[0]):
        cells = [name, floor_text(name, statistics.median(p[i][1] for p in per_run))]
        if name == JSON_ROW:
            cells[1] += f" (floor {spread([p[i][2][FLOOR.label] for p in per_run], '.2f', 'x')})"
        cells += [spread([p[i][2][x] for p in per_run], ".2f", "x") for x in labels]
        cells += ["skipped"] * len(skipped)
        rows.append(cells)
    return render(header, rows, markdown)


def snapshots_of(n: int) -> Callable[[MixResult], dict[str, dict[str, float]]]:
    return lambda r: r.snapshots[n]


def percentile_table(
    runs: Sequence[MixResult], contestants: Sequence[Contestant], s: Settings, markdown: bool
) -> str:
    labels = [FLOOR.label, *[c.label for c in contestants]]
    ops: list[tuple[str, Callable[[MixResult], dict[str, dict[str, float]]]]] = [
        ("append", lambda r: r.append),
        ("8 writers, per append_turn call", lambda r: r.writers),
    ]
    ops += [(f"snapshot of {n:,}", snapshots_of(n)) for n in s.snapshot_sizes]
    rows = []
    for name, get in ops:
        cells = [name]
        for label in labels:
            values = [
                f"{statistics.median(get(r)[label][p] for r in runs):,.0f}"
                for p in ("p50", "p90", "p99")
            ]
            cells.append(" / ".join(values))
        rows.append(cells)
    return render(["µs: p50 / p90 / p99", *labels], rows, markdown)


def async_note(runs: Sequence[MixResult]) -> str:
    f, a = FLOOR.label, ASYNC_FLOOR.label
    ratios = [r.append[a]["p50"] / r.append[f]["p50"] for r in runs]
    return (
        f"A bare `RPUSH` through `redis.asyncio` measured {spread(ratios, '.2f', 'x')} the sync "
        "floor (median): that much of an asyncio store's append ratio is the asyncio client, not "
        "the store."
    )


def lane_note(runs: Sequence[MixResult]) -> str:
    f, held = FLOOR.label, LANE_FLOOR.label
    ratios = [r.append[held]["p50"] / r.append[f]["p50"] for r in runs]
    return (
        f"A bare `RPUSH` sent the way redis-history sends its commands (on a connection it "
        f"keeps, `redis_history/wire/lane.py`) measured {spread(ratios, '.2f', 'x')} the floor "
        "(median): the floor pays redis-py's per-command pool work, redis-history does not."
    )


def environment(server_version: str, dists: Sequence[str], argv: Sequence[str]) -> str:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = []
    for dist in dists:
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return (
        f"Machine: {platform.machine()} {cpu or platform.processor()}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}. Python {platform.python_version()}, "
        f"redis-py {redis.__version__}, redis-server {server_version}; {', '.join(versions)}.\n"
        f"Command: `python benchmarks/bench_peers.py {' '.join(argv)}`".rstrip()
    )


# --------------------------------------------------------------------------- main


def settings(args: argparse.Namespace) -> Settings:
    if args.quick:
        return Settings(
            rounds=args.rounds or 60,
            warmup=6,
            snapshot_sizes=(100, 500),
            snapshot_rounds=(5, 3),
            memory_size=100,
            writer_messages=12,
            writer_reps=1,
        )
    rounds = args.rounds or 2000
    return Settings(
        rounds=rounds,
        warmup=max(3, rounds // 10),
        snapshot_sizes=(240, 1000, 5000),
        snapshot_rounds=(max(5, rounds // 10), max(5, rounds // 40), max(5, rounds // 100)),
        memory_size=1000,
        writer_messages=max(20, rounds // 8),
        writer_reps=3,
    )


def profile(url: str, turns: list[Turn], n: int) -> str:
    """cProfile of ``n`` default-settings redis-history appends of a mix, in order."""
    store = RedisHistoryStore(url, new_id("profile"))
    natives = [store.prepare(m) for m in flatten(turns)[:n]]
    profiler = cProfile.Profile()
    began = time.perf_counter()
    profiler.enable()
    for native in natives:
        store.history.append(native)
    profiler.disable()
    elapsed = time.perf_counter() - began
    store.client.close()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(18)
    return (
        f"{n} appends in {elapsed:.2f} s ({elapsed / n * 1e6:.0f} µs each, profiled)\n"
        + text.getvalue()
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--mix",
        choices=("chat", "tool-heavy", "both"),
        default="both",
        help="the traffic: user and assistant texts (~600 B), whole tool-calling turns with "
        "2-40 KB results (~3.6 KB a message), or both (the default)",
    )
    parser.add_argument("--rounds", type=int, help="timed appends per contestant (default 2000)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="whole runs; cells show median (min-max)"
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted({c.slug for c in CONTESTANTS}),
        help="run only this peer (repeatable); the floor always runs",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print the tables as docs/benchmarks.md shows them"
    )
    parser.add_argument("--json", help="write every run's raw numbers here")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile 2,000 default appends (of the tool-heavy mix, unless only chat)",
    )
    parser.add_argument(
        "--staging",
        action="store_true",
        help="also run redis-history never staged and always staged (see STAGE_BYTES)",
    )
    parser.add_argument(
        "--compression",
        action="store_true",
        help="also run redis-history never compressing and compressing from 1 KiB "
        "(see codec.COMPRESS_BYTES)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="configure an OpenTelemetry SDK meter provider first (needs opentelemetry-sdk), "
        "so redis-history's pod metrics are recorded, not dropped",
    )
    return parser.parse_args(argv)


def configure_meter_provider() -> None:
    """What an application does to collect the pods' metrics: a global SDK meter provider,
    read in memory here so no exporter's I/O is timed."""
    from opentelemetry import metrics  # noqa: PLC0415  (only with --otel)
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415

    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


METHOD = (
    "Append: one message per call, single writer, the mix in order (tool calls, then their "
    "results); each round calls every contestant once, in a new shuffled order. 8 writers: "
    "8 processes released by one event, each appending its own whole "
    "turns to one shared conversation through the store's batch call (`append_many`, "
    "`add_messages`, `add_items`; llama-index has none, so `add_message` per message); the "
    "floor is one `RPUSH` per turn, and in the next row one `RPUSH` per message (the round "
    "trips of the peers without a batch append); throughput is messages / (last end - first "
    "start). "
    "The floor's `json.dumps` of each message is inside its timed call, as every "
    "contestant's own serialisation is. "
    "Snapshot: the whole conversation, read back as the store's own objects. Memory: "
    "`MEMORY USAGE ... SAMPLES 0` of every key holding the conversation id, per message, "
    "against the floor's and against the mean bytes of the messages' own JSON. "
    "The benchmark's own objects (prepared messages) are frozen out of the cyclic GC "
    "(`gc.freeze`), so a full collection of them does not land on whichever call is running."
)


def per_call_table(
    per_call: dict[str, dict[str, str]],
    keys: dict[str, dict[str, dict[str, int]]],
    contestants: Sequence[Contestant],
    markdown: bool,
) -> str:
    """Keys (with their MEMORY USAGE in each mix), round trips and Redis commands per call."""
    mixes = list(keys)
    turn = next(iter(per_call.values()))["messages per turn"]
    header = [
        "",
        f"keys, bytes at the memory row's length ({' / '.join(mixes)})",
        "round trips / append",
        "Redis commands / append (a script's calls included)",
        f"round trips / turn of {turn} messages",
        "round trips / read",
        "commands / read",
    ]
    rows = [
        [
            c.label,
            ", ".join(
                f"`{k}` {' / '.join(f'{keys[m][c.label][k]:,}' for m in mixes)}"
                for k in keys[mixes[0]][c.label]
            ),
            per_call[c.label]["append round trips"],
            per_call[c.label]["append commands"],
            per_call[c.label]["turn round trips"],
            per_call[c.label]["snapshot round trips"],
            per_call[c.label]["snapshot commands"],
        ]
        for c in [FLOOR, *contestants]
    ]
    notes = "\n".join(f"- {c.label}: {c.per_call}" for c in [FLOOR, *contestants])
    return render(header, rows, markdown) + "\n\n" + notes


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    s = settings(args)
    if args.otel:
        configure_meter_provider()
    contestants, skipped = select(args.only)
    if args.staging:
        contestants += STAGING_VARIANTS
    if args.compression:
        contestants += COMPRESSION_VARIANTS
    n_messages = max(s.warmup + s.rounds, *s.snapshot_sizes, 2000 if args.profile else 0)
    n_messages = max(n_messages, WRITERS * (s.writer_messages + 30) * 2)
    mixes = {
        name: make(n_messages) for key, (name, make) in MIXES.items() if args.mix in (key, "both")
    }
    heaviest = list(mixes)[-1]
    runs: dict[str, list[MixResult]] = {name: [] for name in mixes}
    with RedisServer() as server:
        client = server.client()
        server_version = str(client.info("server")["redis_version"])
        for _ in range(args.repeat):
            for name, turns in mixes.items():
                runs[name].append(run_mix(contestants, server.url, turns, s, client))
                client.flushdb()
        per_call = asyncio.run(per_call_phase(contestants, server.url, mixes[heaviest], client))
        profiled = profile(server.url, mixes[heaviest], 2000) if args.profile else ""
        client.close()

    dists = ["redis-history", *[d for c in contestants for d in c.dists if d != "redis-history"]]
    h, hh = ("## ", "### ") if args.markdown else ("", "")
    print(f"{h}redis-history and its peers, as ratios to the raw-Redis floor (lower is better)\n")
    print(environment(server_version, dists, argv))
    print(
        f"\n{args.repeat} run(s); in each, {s.rounds} timed appends per contestant after "
        f"{s.warmup} warm-up ones, snapshots {'/'.join(map(str, s.snapshot_rounds))} reads, "
        f"8 writers x {s.writer_messages} messages x {s.writer_reps} runs (median). "
        + ("Cells: median of the runs (min-max). " if args.repeat > 1 else "")
        + METHOD
    )
    for label, why in skipped.items():
        print(f"\n{label}: {why}")
    for name, turns in mixes.items():
        print(f"\n{hh}{name}\n")
        print(stats_table(turns))
        print()
        print(ratio_table(runs[name], contestants, skipped, s, args.markdown))
        print()
        print(percentile_table(runs[name], contestants, s, args.markdown))
        print()
        print(async_note(runs[name]))
        print()
        print(lane_note(runs[name]))
    print(f"\n{hh}What each contestant does per call\n")
    keys = {name.split(" ")[0]: rs[0].keys for name, rs in runs.items()}
    print(per_call_table(per_call, keys, contestants, args.markdown))
    if profiled:
        print(f"\n{hh}Profile: redis-history default append, {heaviest}\n")
        print(profiled)
    if args.json:
        dump = {name: [vars(r) for r in rs] for name, rs in runs.items()}
        Path(args.json).write_text(json.dumps({"runs": dump, "per_call": per_call}, indent=2))


if __name__ == "__main__":
    main()
