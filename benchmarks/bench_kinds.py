"""Where an append's median goes, kind by kind: the floor and the store appending the same
messages, and of the store's wait, the part in the send and the part around it.

Run from the repository root::

    python benchmarks/bench_kinds.py [--mix tool-heavy|chat] [--messages N] [--quick]

Every message of the mix (``traffic.py``) is appended once by ``bench_peers.py``'s floor
(``json.dumps`` + ``RPUSH``) and once by the store at its default settings
(``RedisHistory.append``), each to its own conversation, the two in a new shuffled order
for each message. Per kind of message (a user's, an assistant's reply, an assistant's tool
calls, a tool result staged or not), the median wall time of each and their ratio; and of
the store's, the median time inside ``wire.lane.send`` (the round trip and Redis's work) and
what is left (the client's own work: the estimate, the envelope, the call, the reply's
parse), which runs right after a wait, on a cold CPU: two to three times what the same
work takes in a loop (``bench_script_cost.py``). The kinds' shares tell which of them a
mix's median append lands on.

Then the CPU a message costs in all, which is what bounds the 8-writer row of
``bench_peers.py`` (eight processes on a machine's cores): the mix's whole turns appended
with each one's batch call (``append_turn``), the writer process's CPU time
(``time.process_time``: its Python and the kernel's send and receive) and Redis's
(``INFO cpu``'s main-thread time), per message.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import Floor, RedisHistoryStore
from traffic import Msg, Turn, chat_turns, flatten, tool_heavy_turns

from redis_history.demo.server import RedisServer
from redis_history.store import history as history_module
from redis_history.store.codec import encode_message
from redis_history.store.core import STAGE_BYTES
from redis_history.tokens import EstimatingCounter, Pricer

KINDS = ("user", "assistant", "tool calls", "tool result", "tool result, staged")


def kind(message: Msg, envelope: bytes) -> str:
    """The message's kind, a tool result's by whether the store stages its envelope."""
    if message.role == "tool":
        return "tool result, staged" if len(envelope) >= STAGE_BYTES else "tool result"
    if message.tool_calls:
        return "tool calls"
    return message.role


def measure(url: str, traffic: Sequence[Msg], seed: int = 5) -> dict[str, dict[str, list[float]]]:
    """µs per append by kind: the floor's and the store's wall, the store's send."""
    floor, store = Floor(url, "kinds-floor"), RedisHistoryStore(url, "kinds-store")
    price = Pricer(EstimatingCounter())
    times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    send = history_module.send  # type: ignore[attr-defined]
    sent: list[float] = []

    def timed_send(client: Any, call: Any) -> Any:
        began = time.perf_counter()
        try:
            return send(client, call)
        finally:
            sent.append(time.perf_counter() - began)

    rng = random.Random(seed)
    setattr(history_module, "send", timed_send)  # noqa: B010
    try:
        for message in traffic:
            native, wire = store.prepare(message), floor.prepare(message)
            of = times[kind(message, encode_message(native, price, 1 << 30)[0])]
            order = [("floor", floor, wire), ("store", store, native)]
            rng.shuffle(order)
            for label, contestant, item in order:
                began = time.perf_counter()
                contestant.append(item)
                of[label].append((time.perf_counter() - began) * 1e6)
            of["send"].append(sent.pop() * 1e6)
    finally:
        setattr(history_module, "send", send)  # noqa: B010
        floor.client.close()
        store.client.close()
    return times


def cpu_per_message(url: str, client: redis.Redis, turns: Sequence[Turn]) -> dict[str, Any]:
    """µs of the writer's and of Redis's CPU per message, appending ``turns`` whole: the
    floor, the store, the floor again and the store again (the lower of each pair)."""
    messages = sum(len(t) for t in turns)
    measured: dict[str, dict[str, float]] = {}
    for run, contestant in enumerate((Floor, RedisHistoryStore) * 2):
        store = contestant(url, f"kinds-cpu-{run}")
        natives = [[store.prepare(m) for m in turn] for turn in turns]
        server = _server_cpu(client)
        began = time.process_time()
        for turn in natives:
            store.append_turn(turn)
        spent = {
            "writer": (time.process_time() - began) * 1e6 / messages,
            "redis": (_server_cpu(client) - server) * 1e6 / messages,
        }
        asyncio.run(store.aclose())
        label = "floor" if contestant is Floor else "store"
        kept = measured.get(label)
        measured[label] = spent if kept is None else {k: min(kept[k], spent[k]) for k in spent}
    return measured


def _server_cpu(client: redis.Redis) -> float:
    """Seconds of CPU Redis's main thread has used (``INFO cpu``)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_sys_main_thread"]) + float(cpu["used_cpu_user_main_thread"])


def cpu_report(measured: dict[str, dict[str, float]]) -> str:
    rows = [
        "| CPU per message, µs | the writer | Redis | in all |",
        "|---|---:|---:|---:|",
    ]
    for label in ("floor", "store"):
        spent = measured[label]
        rows.append(
            f"| {label} | {spent['writer']:.1f} | {spent['redis']:.1f} "
            f"| {spent['writer'] + spent['redis']:.1f} |"
        )
    return "\n".join(rows)


def report(times: dict[str, dict[str, list[float]]], count: int) -> str:
    rows = [
        "| kind | share | floor, median µs | store, median µs | store / floor "
        "| store: in the send | store: the rest |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    every: dict[str, list[float]] = {"floor": [], "store": []}
    for name in KINDS:
        t = times.get(name)
        if not t:
            continue
        f, s, sent = (statistics.median(t[k]) for k in ("floor", "store", "send"))
        rest = statistics.median(a - b for a, b in zip(t["store"], t["send"], strict=True))
        every["floor"] += t["floor"]
        every["store"] += t["store"]
        share = len(t["floor"]) / count
        rows.append(
            f"| {name} | {share:.1%} | {f:.1f} | {s:.1f} | {s / f:.2f}x | {sent:.1f} | {rest:.1f} |"
        )
    f, s = statistics.median(every["floor"]), statistics.median(every["store"])
    rows.append(f"| every message | 100.0% | {f:.1f} | {s:.1f} | {s / f:.2f}x | | |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mix", choices=("tool-heavy", "chat"), default="tool-heavy")
    parser.add_argument("--messages", type=int, default=4000, help="messages of the mix")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    args = parser.parse_args(argv)
    n = 200 if args.quick else args.messages
    turns = tool_heavy_turns(n) if args.mix == "tool-heavy" else chat_turns(n)
    traffic = flatten(turns)[:n]
    with RedisServer() as server:
        client = server.client()
        version = str(client.info("server")["redis_version"])
        times = measure(server.url, traffic)
        cpu = cpu_per_message(server.url, client, turns[: max(1, len(turns) // 2)])
        client.close()
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}, redis-server "
        f"{version}; {len(traffic)} messages of the {args.mix} mix; command: "
        f"python benchmarks/bench_kinds.py {' '.join(sys.argv[1:])}\n"
    )
    print(report(times, len(traffic)))
    print()
    print(cpu_report(cpu))


if __name__ == "__main__":
    main()
