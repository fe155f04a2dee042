"""What compressing large message bodies buys on the tool-heavy mix, and what it costs.

Run from the repository root (``zstandard`` is optional: without it only zlib is measured)::

    python benchmarks/bench_compression.py [--messages N] [--rounds N] [--quick] [--json PATH]

Two ways, measured on the same seeded traffic (``traffic.tool_heavy_turns``):

- **On the client**: each message's text (its ``content``, UTF-8) compressed by zstd at low
  levels and zlib at level 1. For each codec: the ratio (text bytes / compressed bytes) by
  kind of tool result and over every text of at least each threshold, the CPU time per KB
  to compress and to decompress (each body in a loop, best of three), and what the stored
  envelopes would weigh against the messages' chat-completions JSON if every text of at
  least the threshold were kept compressed (the envelope's other fields as they are, and
  8 bytes of framing).
- **In Redis**: ``list-compress-depth`` (LZF on the quicklist's nodes, all but the ``depth``
  nodes at each end), set by ``CONFIG SET`` on the benchmark's own server before each list
  is made (a list keeps the depth it was made with), under the store's JSON envelopes
  (``codec.COMPRESS_BYTES`` out of reach) and under its default compressed ones. The same
  messages are appended through ``RedisHistory.append_many`` a turn at a time to one
  conversation per variant, then: the list's ``MEMORY USAGE`` and the server's
  ``used_memory`` growth per message, and, timed in alternation between the variants, a raw
  ``LRANGE 0 -1``, ``snapshot()``, the last 20 messages (``LRANGE -20 -1``) and the append
  of a new turn.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import new_id, to_message
from traffic import TOOL_RESULT_KINDS, Msg, Turn, flatten, tool_heavy_turns

from redis_history import RedisHistory
from redis_history.demo.server import RedisServer
from redis_history.store import codec
from redis_history.store.codec import encode_message
from redis_history.tokens import Pricer, resolve_counter

THRESHOLDS = (512, 1024, 2048, 4096)
"""Texts of at least this many bytes are compressed, in the stored-size estimate."""
FRAMING = 8
"""What an envelope would carry besides the compressed bytes (a field name, a length)."""

Codec = tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]


@contextlib.contextmanager
def compressing(threshold: int) -> Iterator[None]:
    """The store compressing texts of ``threshold`` bytes or more while inside."""
    saved, codec.COMPRESS_BYTES = codec.COMPRESS_BYTES, threshold
    try:
        yield
    finally:
        codec.COMPRESS_BYTES = saved


NEVER = 1 << 62


def codecs() -> dict[str, Codec]:
    """The codecs to measure: zstd at levels -1, 1 and 3 when ``zstandard`` imports, and
    zlib at level 1 (the standard library's fastest)."""
    out: dict[str, Codec] = {}
    try:
        import zstandard  # noqa: PLC0415  (optional)
    except ImportError:
        print("zstandard is not installed: zlib only", file=sys.stderr)
    else:
        for level in (-1, 1, 3):
            c = zstandard.ZstdCompressor(level=level)
            d = zstandard.ZstdDecompressor()
            out[f"zstd {level}"] = (c.compress, d.decompress)
    out["zlib 1"] = (lambda b: zlib.compress(b, 1), zlib.decompress)
    return out


def per_kb(call: Callable[[bytes], object], bodies: Sequence[bytes]) -> float:
    """µs of CPU per KB (1,024 bytes of input) of ``call`` over ``bodies``, best of three."""
    total = sum(map(len, bodies)) / 1024
    best = float("inf")
    for _ in range(3):
        began = time.process_time_ns()
        for body in bodies:
            call(body)
        best = min(best, (time.process_time_ns() - began) / 1000 / total)
    return best


def kind_of(m: Msg) -> str:
    return m.kind if m.role == "tool" else m.role


def client_side(messages: Sequence[Msg]) -> dict[str, Any]:
    """Ratios, speeds and stored sizes of each codec (see the module's docstring)."""
    counter = Pricer(resolve_counter(None))
    wire = [len(m.wire_json().encode()) for m in messages]
    natives = [to_message(m) for m in messages]
    with compressing(NEVER):
        envelopes = [len(encode_message(m, counter, 1 << 24)[0]) for m in natives]
    store = sum(len(encode_message(m, counter, 1 << 24)[0]) for m in natives)
    texts = [m.content.encode() for m in messages]
    escaped = [len(json.dumps(m.content, ensure_ascii=False).encode()) for m in messages]
    out: dict[str, Any] = {
        "messages": len(messages),
        "json bytes": sum(wire),
        "envelope bytes": sum(envelopes),
        "store envelope bytes": store,
        "codecs": {},
    }
    large = [t for t in texts if len(t) >= 2048]
    for name, (compress, decompress) in codecs().items():
        packed = [compress(t) if t else b"" for t in texts]
        ratio: dict[str, float] = {}
        for kind in (*TOOL_RESULT_KINDS, "user", "assistant"):
            mine = [i for i, m in enumerate(messages) if kind_of(m) == kind and texts[i]]
            ratio[kind] = sum(len(texts[i]) for i in mine) / sum(len(packed[i]) for i in mine)
        stored = {}
        for threshold in THRESHOLDS:
            total = 0
            for i, size in enumerate(envelopes):
                saved = escaped[i] - len(packed[i]) - FRAMING
                total += size - saved if len(texts[i]) >= threshold else size
            share = sum(len(t) for t in texts if len(t) >= threshold) / sum(map(len, texts))
            stored[threshold] = {"stored / json": total / sum(wire), "text share": share}
        out["codecs"][name] = {
            "ratio": ratio,
            "ratio, texts of 2 KiB or more": sum(map(len, large))
            / sum(len(compress(t)) for t in large),
            "compress µs/KB": per_kb(compress, large),
            "decompress µs/KB": per_kb(decompress, [compress(t) for t in large])
            * sum(len(compress(t)) for t in large)
            / sum(map(len, large)),
            "stored": stored,
        }
    return out


def used_memory(client: redis.Redis) -> int:
    gc.collect()
    return int(client.info("memory")["used_memory"])


def median_us(samples: Sequence[float]) -> float:
    return statistics.median(samples) / 1000


VARIANTS = {
    "JSON, depth 0": (NEVER, 0),
    "JSON, depth 1": (NEVER, 1),
    "compressed, depth 0": (codec.COMPRESS_BYTES, 0),
    "compressed, depth 1": (codec.COMPRESS_BYTES, 1),
}
"""The store's envelopes (JSON, or its default compression) by ``list-compress-depth``."""


def redis_side(
    url: str, turns: Sequence[Turn], extra: Sequence[Turn], rounds: int
) -> dict[str, Any]:
    """Each of :data:`VARIANTS`: memory, reads and appends (see the module's docstring)."""
    client = redis.Redis.from_url(url)
    n = sum(map(len, turns))
    histories: dict[str, RedisHistory] = {}
    out: dict[str, Any] = {"messages": n, "variants": {}}
    for name, (threshold, depth) in VARIANTS.items():
        client.config_set("list-compress-depth", depth)
        history = RedisHistory(client, new_id(name.replace(" ", "").replace(",", "-")))
        before = used_memory(client)
        with compressing(threshold):
            for turn in turns:
                history.append_many([to_message(m) for m in turn])
        grown = used_memory(client) - before
        usage = int(client.memory_usage(history.keys.msgs, samples=0) or 0)
        out["variants"][name] = {
            "MEMORY USAGE of the list per message": usage / n,
            "used_memory growth per message": grown / n,
        }
        histories[name] = history
    client.config_set("list-compress-depth", 0)
    timings: dict[str, dict[str, list[float]]] = {name: {} for name in VARIANTS}
    calls: dict[str, Callable[[RedisHistory], object]] = {
        "LRANGE 0 -1": lambda h: client.lrange(h.keys.msgs, 0, -1),
        "snapshot()": lambda h: h.snapshot(),
        "LRANGE -20 -1": lambda h: client.lrange(h.keys.msgs, -20, -1),
    }
    new_turns = iter(extra)
    for _ in range(rounds):
        turn = next(new_turns)
        for name, (threshold, _) in VARIANTS.items():
            h = histories[name]
            for what, call in calls.items():
                began = time.perf_counter_ns()
                call(h)
                timings[name].setdefault(what, []).append(time.perf_counter_ns() - began)
            batch = [to_message(m) for m in turn]
            with compressing(threshold):
                began = time.perf_counter_ns()
                h.append_many(batch)
                elapsed = time.perf_counter_ns() - began
            timings[name].setdefault("append_many of a turn", []).append(elapsed)
    for name in VARIANTS:
        out["variants"][name].update(
            {f"{what}, median µs": median_us(v) for what, v in timings[name].items()}
        )
    client.close()
    return out


def print_report(client: dict[str, Any], server: dict[str, Any] | None) -> None:
    print(
        f"{client['messages']:,} messages of the tool-heavy mix: "
        f"{client['json bytes'] / client['messages']:,.0f} B of JSON a message, "
        f"{client['envelope bytes'] / client['messages']:,.0f} B of JSON envelope, "
        f"{client['store envelope bytes'] / client['messages']:,.0f} B as the store keeps "
        f"it (texts of {codec.COMPRESS_BYTES:,} B or more compressed)\n"
    )
    kinds = [*TOOL_RESULT_KINDS, "user", "assistant"]
    header = [
        "codec",
        *[f"ratio: {k}" for k in kinds],
        "ratio, texts >= 2 KiB",
        "compress µs/KB",
        "decompress µs/KB (per KB of text)",
    ]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for name, c in client["codecs"].items():
        cells = [name, *[f"{c['ratio'][k]:.2f}" for k in kinds]]
        cells += [
            f"{c['ratio, texts of 2 KiB or more']:.2f}",
            f"{c['compress µs/KB']:.2f}",
            f"{c['decompress µs/KB']:.2f}",
        ]
        print("| " + " | ".join(cells) + " |")
    print("\nStored envelopes / the messages' JSON, texts of at least the threshold compressed:\n")
    header = ["codec", *[f"from {t:,} B" for t in THRESHOLDS]]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * len(THRESHOLDS))
    print(
        "| none | "
        + " | ".join([f"{client['envelope bytes'] / client['json bytes']:.3f}"] * len(THRESHOLDS))
        + " |"
    )
    for name, c in client["codecs"].items():
        cells = [f"{c['stored'][t]['stored / json']:.3f}" for t in THRESHOLDS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    shares = next(iter(client["codecs"].values()))["stored"]
    print(
        "\nShare of the text bytes compressed: "
        + ", ".join(f"from {t:,} B {shares[t]['text share']:.1%}" for t in THRESHOLDS)
    )
    if server is None:
        return
    print(f"\nlist-compress-depth, {server['messages']:,} messages in one conversation:\n")
    variants = server["variants"]
    print("| | " + " | ".join(variants) + " |")
    print("|---|" + "---:|" * len(variants))
    for row in next(iter(variants.values())):
        cells = [f"{variants[v][row]:,.0f}" for v in variants]
        print(f"| {row} | " + " | ".join(cells) + " |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=4000, help="messages of the mix")
    parser.add_argument("--rounds", type=int, default=200, help="timed reads and appends")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--no-redis", action="store_true", help="the client-side part only")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args(argv)
    n, rounds = (400, 10) if args.quick else (args.messages, args.rounds)
    turns = tool_heavy_turns(n + 4 * rounds)
    kept, extra = turns[: n // 4], turns[n // 4 :]
    client = client_side(flatten(kept))
    server = None
    version = ""
    if not args.no_redis:
        with RedisServer() as s:
            version = str(s.client().info("server")["redis_version"])
            server = redis_side(s.url, kept, extra, rounds)
    print(
        f"Python {platform.python_version()}, redis-server {version or '-'}; "
        f"command: python benchmarks/bench_compression.py {' '.join(sys.argv[1:])}\n"
    )
    print_report(client, server)
    if args.json:
        Path(args.json).write_text(json.dumps({"client": client, "server": server}, indent=2))


if __name__ == "__main__":
    main()
