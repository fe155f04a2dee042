"""What a whole read costs the client, against the floor's: instructions, and the collector's share.

Run: ``python benchmarks/bench_read_cost.py [--mix chat|tool-heavy|both] [--messages N]
[--rounds N] [--quick]`` (the instruction counts need ``valgrind``; without it only the
wall times are printed).

A snapshot's ratio to the floor moves with the machine and with what ran before it;
instruction counts do not. ``bench_peers.py``'s mixes, the first ``--messages`` of each,
are stored as the store stores them (``encode_message`` with the default estimate:
compressed envelopes included) and as the floor does (each message's chat-completions
JSON), and decoded with no Redis in between: the store's ``decode_messages`` (what
``snapshot()`` runs on an ``LRANGE`` reply) against the floor's ``json.loads`` of each.

- **Instructions** per read, counted by valgrind's callgrind in a child process
  (``PYTHONHASHSEED=0``) as the difference between three reads and one, the process's
  collector running at its defaults, as in a pod; the share of it spent inside the
  collector's collections (``gc_collect_main``) counted apart.
- **Wall time** per read on this machine, both decoders interleaved in a new shuffled
  order each round (medians), once as the process's collector runs and once paused
  around each read: what the collections cost each decoder here.

The benchmark's own objects are frozen out of the collector first (``gc.freeze``), as in
``bench_peers.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_peers import frozen_heap, shuffled
from peers import to_message
from traffic import chat_turns, flatten, tool_heavy_turns

from redis_history.store.codec import decode_messages, encode_message
from redis_history.tokens import Pricer, resolve_counter

MIXES = {"chat": chat_turns, "tool-heavy": tool_heavy_turns}
READERS = ("floor", "store")
WARMUP = 3
"""Rounds of wall-time reads not counted."""

Inputs = dict[str, tuple[list[bytes], list[bytes]]]
"""By mix: the store's envelopes and the floor's JSON, message for message."""


def inputs(mixes: Sequence[str], n: int) -> Inputs:
    counter = Pricer(resolve_counter(None))
    out: Inputs = {}
    for mix in mixes:
        messages = flatten(MIXES[mix](n))[:n]
        envelopes = [encode_message(to_message(m), counter, 1 << 24)[0] for m in messages]
        out[mix] = (envelopes, [m.wire_json().encode() for m in messages])
    return out


def reader(which: str, envelopes: list[bytes], wire: list[bytes]) -> Callable[[], object]:
    if which == "floor":
        return lambda: [json.loads(item) for item in wire]
    return lambda: decode_messages(envelopes)


def child(path: str, mix: str, which: str, reads: int) -> None:
    """Run under callgrind: one read to warm up, then ``reads`` more."""
    envelopes, wire = pickle.loads(Path(path).read_bytes())[mix]
    read = reader(which, envelopes, wire)
    gc.collect()
    gc.freeze()
    read()
    for _ in range(reads):
        result = read()
        del result


def instructions(path: str, mix: str, which: str, reads: int, collect: str | None) -> int:
    """Instructions of the child's whole run (in ``collect`` only, when given)."""
    with tempfile.TemporaryDirectory(prefix="rh-read-cost-") as tmp:
        out = Path(tmp) / "callgrind.out"
        toggle = [f"--toggle-collect={collect}"] if collect else []
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *toggle,
                sys.executable, __file__, "--child", path, mix, which, str(reads),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError("callgrind wrote no totals")
    return int(match.group(1))


def per_read(path: str, mix: str, which: str, collect: str | None = None) -> float:
    """Instructions of one read: three reads' count less one read's, halved."""
    return (
        instructions(path, mix, which, 3, collect) - instructions(path, mix, which, 1, collect)
    ) / 2


def wall(envelopes: list[bytes], wire: list[bytes], rounds: int) -> dict[str, float]:
    """Median µs per read of each reader, the collector running and paused around the read,
    the calls in :func:`bench_peers.shuffled` order."""
    calls = {
        f"{which}{suffix}": (reader(which, envelopes, wire), paused)
        for which in READERS
        for suffix, paused in (("", False), (", paused", True))
    }
    samples: dict[str, list[float]] = {label: [] for label in calls}
    for i, order in enumerate(shuffled(list(calls), rounds + WARMUP)):
        for label in order:
            read, paused = calls[label]
            if paused:
                gc.disable()
            began = time.perf_counter_ns()
            result = read()
            elapsed = time.perf_counter_ns() - began
            gc.enable()
            del result
            if i >= WARMUP:
                samples[label].append(elapsed / 1000)
    return {label: statistics.median(values) for label, values in samples.items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mix", choices=[*MIXES, "both"], default="both")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run, no valgrind")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        path, mix, which, reads = args.child
        child(path, mix, which, int(reads))
        return
    mixes = list(MIXES) if args.mix == "both" else [args.mix]
    n, rounds = (40, 3) if args.quick else (args.messages, args.rounds)
    data = inputs(mixes, n)
    count = not args.quick and shutil.which("valgrind") is not None
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {n} messages a read; "
        f"command: python benchmarks/bench_read_cost.py {' '.join(argv or sys.argv[1:])}\n"
    )
    print(
        "| mix | instructions: floor | store | store / floor | store: in collections "
        "| wall: floor | store | store / floor | collector paused: store / floor |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="rh-read-cost-") as tmp:
        path = str(Path(tmp) / "inputs.pickle")
        Path(path).write_bytes(pickle.dumps(data))
        with frozen_heap():
            for mix in mixes:
                print(row(path, mix, data, rounds, count=count), flush=True)


def row(path: str, mix: str, data: Inputs, rounds: int, *, count: bool) -> str:
    """One mix's row of the table: the counts (when ``count``) and the wall times."""
    times = wall(*data[mix], rounds)
    counted = ["-", "-", "-", "-"]
    if count:
        floor, store = per_read(path, mix, "floor"), per_read(path, mix, "store")
        in_gc = per_read(path, mix, "store", "gc_collect_main")
        counted = [f"{floor:,.0f}", f"{store:,.0f}", f"{store / floor:.2f}x"]
        counted.append(f"{in_gc:,.0f} ({in_gc / store:.0%})")
    ratio = times["store"] / times["floor"]
    paused = times["store, paused"] / times["floor, paused"]
    return (
        f"| {mix} | {' | '.join(counted)} | {times['floor']:,.0f} µs "
        f"| {times['store']:,.0f} µs | {ratio:.2f}x | {paused:.2f}x |"
    )


if __name__ == "__main__":
    main()
