"""Where a scripted append's time goes: Redis's time per call, the client's wall per call, and
how much of Redis's time the client pays again waiting for the reply.

Run from the repository root::

    python benchmarks/bench_script_cost.py [--messages N] [--quick]

On the chat mix (``traffic.chat_turns``), every message is appended once by each contestant
below, each to its own conversation, in blocks of 40 messages taken in a new shuffled order
of the contestants, every command sent the way the store sends its own
(``wire.lane.execute``), with a little Python work between two calls, as an application has.
Redis's time per call is ``INFO commandstats``'s ``usec_per_call`` of each block (after a
``CONFIG RESETSTAT``), the median over the blocks; the client's is the median wall time of
the calls, each of which makes the store's command for its message (the encoding is in
every row). The contestants:

- ``RPUSH`` of the store's envelope: the command alone;
- ``EVALSHA`` of ``return 0`` with the store's append arguments: what running a script
  costs Redis before the script does anything;
- the minimal scripted append (``peers.MINIMAL_SCRIPT``: ``RPUSH``, ``HINCRBY``);
- the store's general append script (``lua/append-5.lua``), as it was sent for one message
  before short batches had their own (``HistoryCore._append_call``);
- the store's append of a short batch (``lua/append_small-4.lua``: the same commands,
  checks and records, no helper functions), as ``RedisHistory.append`` sends it.

Then what a microsecond of Redis's time costs the client: scripts that ``RPUSH`` after a
Lua loop of 0, 400 and 800 additions, the slope of the client's wall time against Redis's;
and the client's own CPU: ``RedisHistory.append`` with Redis's reply at hand (no I/O) against
the floor's ``json.dumps`` of the same messages.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import MINIMAL_SCRIPT, to_message, wire_bytes
from traffic import chat_turns, flatten

from redis_history import Message, RedisHistory
from redis_history.demo.server import RedisServer
from redis_history.store import history as history_module
from redis_history.store.codec import encode_message, role_item
from redis_history.store.core import op_token
from redis_history.wire.lane import execute
from redis_history.wire.scripts import script

BLOCK = 40
"""Messages a contestant appends between two reads of Redis's counters."""

WORK = 300
"""``sum(range(WORK))`` between two calls: an application's own work (a few µs)."""

LOOPS = (0, 400, 800)
"""Additions a padded script makes before its ``RPUSH``."""


def padded(n: int) -> str:
    return (
        f"local x = 0 for i = 1, {n} do x = x + i end return redis.call('RPUSH', KEYS[1], ARGV[1])"
    )


def contestants(client: redis.Redis) -> dict[str, Callable[[RedisHistory, Message], Any]]:
    """Each contestant's append of one message to the conversation of a history."""
    empty = client.script_load("return 0")
    minimal = client.script_load(MINIMAL_SCRIPT)
    for name in ("append", "append_small"):
        client.script_load(script(name).source)

    def general(history: RedisHistory, message: Message) -> tuple[Any, ...]:
        core = history.core
        envelope, tokens = encode_message(message, core._price, core.max_message_bytes)
        token = op_token("append", (message.id,))
        return core._append_call(token, tokens, (envelope,), role_item(message)).command

    return {
        "RPUSH of the envelope": lambda h, m: execute(
            client, ("RPUSH", h.keys.msgs, general(h, m)[15])
        ),
        "EVALSHA of `return 0`, the append's arguments": lambda h, m: execute(
            client, ("EVALSHA", empty, *general(h, m)[2:])
        ),
        "minimal scripted append": lambda h, m: execute(
            client, ("EVALSHA", minimal, 2, h.keys.msgs, h.keys.meta, 1, general(h, m)[15])
        ),
        "the store's general script, append-5.lua": lambda h, m: execute(client, general(h, m)),
        "the store's small append, append_small-4.lua": lambda h, m: execute(
            client, h.core.append([m]).command
        ),
    }


def interleaved(
    client: redis.Redis,
    runs: dict[str, Callable[[RedisHistory, Message], Any]],
    messages: Sequence[Message],
    command: Callable[[str], str],
    prefix: str,
) -> dict[str, dict[str, float]]:
    """Each contestant's Redis µs per call (median of the blocks' ``usec_per_call`` of
    ``command``) and the client's wall µs per call (median of the calls)."""
    histories = {name: RedisHistory(client, f"{prefix}-{i}") for i, name in enumerate(runs)}
    for history in histories.values():
        history.append(messages[0])
    server: dict[str, list[float]] = {name: [] for name in runs}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for start in range(1, len(messages) - BLOCK + 1, BLOCK):
        block = messages[start : start + BLOCK]
        random.shuffle(names)
        for name in names:
            run, history = runs[name], histories[name]
            client.config_resetstat()
            for message in block:
                began = time.perf_counter()
                reply = run(history, message)
                wall[name].append(time.perf_counter() - began)
                if isinstance(reply, list) and reply and reply[0] != 0:
                    raise RuntimeError(f"{name} refused message {message.id}: {reply}")
                sum(range(WORK))
            stats = client.info("commandstats")[f"cmdstat_{command(name)}"]
            server[name].append(float(stats["usec_per_call"]))
    return {
        name: {
            "server_us": statistics.median(server[name]),
            "wall_us": statistics.median(wall[name]) * 1e6,
        }
        for name in runs
    }


def command_of(name: str) -> str:
    return "rpush" if name.startswith("RPUSH") else "evalsha"


def amplification(client: redis.Redis, messages: int) -> dict[str, Any]:
    """Scripts padded with Lua loops: Redis's µs and the client's wall µs for each, and the
    slope of the wall against Redis's time (least squares)."""
    envelope = b"x" * 600

    def pushing(sha: str) -> Callable[[RedisHistory, Message], Any]:
        return lambda h, _m: execute(client, ("EVALSHA", sha, 1, h.keys.msgs, envelope))

    runs = {f"loop {n}": pushing(client.script_load(padded(n))) for n in LOOPS}
    pushes = [Message.user("x") for _ in range(messages)]
    measured = interleaved(client, runs, pushes, lambda _name: "evalsha", "padded")
    xs = [measured[f"loop {n}"]["server_us"] for n in LOOPS]
    ys = [measured[f"loop {n}"]["wall_us"] for n in LOOPS]
    slope = statistics.linear_regression(xs, ys).slope
    return {"scripts": measured, "slope": slope}


def client_cpu(messages: Sequence[Message], wires: Sequence[dict[str, Any]]) -> dict[str, float]:
    """µs of the client's CPU per message: ``RedisHistory.append`` with the reply at hand,
    and ``json.dumps`` of the chat-completions message (best of five passes)."""
    history = RedisHistory(redis.Redis(), "cpu")  # never connects: the send is replaced
    send = history_module.send  # type: ignore[attr-defined]
    setattr(history_module, "send", lambda _client, _call: 1)  # noqa: B010

    def append_all() -> None:
        for message in messages:
            history.append(message)

    try:
        store = best(append_all) / len(messages)
    finally:
        setattr(history_module, "send", send)  # noqa: B010
    floor = best(lambda: [wire_bytes(w) for w in wires]) / len(wires)
    return {"append_us": store * 1e6, "json_dumps_us": floor * 1e6}


def best(run: Callable[[], object], times: int = 5) -> float:
    out = []
    for _ in range(times):
        began = time.perf_counter()
        run()
        out.append(time.perf_counter() - began)
    return min(out)


def report(measured: dict[str, Any]) -> str:
    rows = measured["scripts"]
    floor = rows["RPUSH of the envelope"]
    lines = [
        "| per call | Redis µs | client wall µs | wall / RPUSH's |",
        "|---|---:|---:|---:|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['server_us']:.1f} | {row['wall_us']:.1f} | "
            f"{row['wall_us'] / floor['wall_us']:.2f}x |"
        )
    amp = measured["amplification"]
    lines += [
        "",
        "| padded script | Redis µs | client wall µs |",
        "|---|---:|---:|",
        *(
            f"| {name} | {row['server_us']:.1f} | {row['wall_us']:.1f} |"
            for name, row in amp["scripts"].items()
        ),
        "",
        f"Each µs of Redis's time cost the client {amp['slope']:.2f} µs of wall time.",
        "",
        "| client CPU per message, no I/O | µs |",
        "|---|---:|",
        f"| RedisHistory.append (reply at hand) | {measured['cpu']['append_us']:.1f} |",
        f"| json.dumps (the floor's) | {measured['cpu']['json_dumps_us']:.1f} |",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=6000, help="messages of the chat mix")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args(argv)
    n = 400 if args.quick else args.messages
    traffic = flatten(chat_turns(n))[:n]
    messages = [to_message(m) for m in traffic]
    with RedisServer() as server:
        client = server.client()
        version = str(client.info("server")["redis_version"])
        measured: dict[str, Any] = {
            "scripts": interleaved(client, contestants(client), messages, command_of, "append"),
            "amplification": amplification(client, n),
        }
        client.close()
    measured["cpu"] = client_cpu(messages, [m.wire for m in traffic])
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}, redis-server "
        f"{version}; {n} chat messages; command: python benchmarks/bench_script_cost.py "
        f"{' '.join(sys.argv[1:])}\n"
    )
    print(report(measured))
    if args.json:
        Path(args.json).write_text(json.dumps(measured, indent=2))


if __name__ == "__main__":
    main()
