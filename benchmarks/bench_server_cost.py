"""What an appended message costs the Redis server and the client, the store beside the raw
floor: the cost that decides how many shards a deployment buys.

Run from the repository root::

    python benchmarks/bench_server_cost.py [--messages N] [--runs R] [--quick] [--markdown]

One ``redis-server`` of its own (the newest on the machine, a free port, nothing saved), and
the traffic of ``traffic.py``: the chat mix (``chat_turns``, about 600 bytes a message) and
the tool-heavy mix (``tool_heavy_turns``, tool results of 2-40 KB). Per mix, four
contestants append the same ``--messages`` messages, each to a conversation of its own:

- ``floor/turn``: ``json.dumps`` of each message and one ``RPUSH`` per turn;
- ``floor/message``: the same, one ``RPUSH`` per message;
- ``store/turn``: ``RedisHistory.append_many`` per turn;
- ``store/message``: ``RedisHistory.append`` per message;
- ``script/turn`` and ``script/message``: the yardstick of any atomic scripted append, the
  floor's JSON pushed by the minimal script (``peers.MINIMAL_SCRIPT``: ``RPUSH`` and an
  ``HINCRBY`` of a token total) with ``EVALSHA``: what running a script adds before it checks
  or records anything;
- ``empty/turn`` and ``empty/message``: ``EVALSHA`` of ``return 0`` with the same arguments,
  which stores nothing: what calling a script costs the server at all.

A run takes the contestants in a new shuffled order; each is measured over its whole block:

- **server CPU**: the server process's ``used_cpu_user + used_cpu_sys`` (``INFO cpu``) after
  less before, per message;
- **commands' time**: the sum of ``usec`` over ``INFO commandstats`` (reset before), per
  message: what the commands themselves took, the socket and the parsing left out;
- **client CPU**: ``time.process_time()`` around the calls, per message (the messages are
  built before: an application holds them already).

Each figure is the least of ``--runs`` runs (noise only adds CPU), and each ratio is the store
over the floor of the same shape in the same runs. Then whole reads: ``snapshot()`` of chat
conversations of 1,000 and 5,000 messages and of a tool-heavy one of 1,000 against the
floor's ``LRANGE`` and ``json.loads``, client CPU, the least of the runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import MINIMAL_SCRIPT, to_message, wire_bytes
from traffic import Turn, chat_turns, tool_heavy_turns

from redis_history import Message, RedisHistory
from redis_history.demo.server import RedisServer

SHAPES = ("turn", "message")
WHO = ("floor", "store", "script", "empty")
EMPTY_SCRIPT = "return 0"
MIXES: dict[str, Callable[[int], list[Turn]]] = {
    "chat": chat_turns,
    "tool-heavy": tool_heavy_turns,
}


@dataclass(frozen=True)
class Cost:
    """One contestant's block: microseconds per message."""

    server: float
    commands: float
    client: float

    def least(self, other: Cost) -> Cost:
        return Cost(
            min(self.server, other.server),
            min(self.commands, other.commands),
            min(self.client, other.client),
        )


def _server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _commands_usec(client: redis.Redis) -> int:
    return sum(int(stats["usec"]) for stats in client.info("commandstats").values())


class Contestant:
    """One way to append a mix's turns to a conversation of its own."""

    def __init__(self, client: redis.Redis, who: str, shape: str, turns: Sequence[Turn]) -> None:
        self.client = client
        self.who = who
        self.shape = shape
        self.key = f"bench:{who}:{shape}"
        self.messages = sum(len(turn) for turn in turns)
        if who != "store":
            self.natives: list[list[Any]] = [[m.wire for m in turn] for turn in turns]
            self.sha = client.script_load(EMPTY_SCRIPT if who == "empty" else MINIMAL_SCRIPT)
        else:
            self.natives = [[to_message(m) for m in turn] for turn in turns]
            self.history = RedisHistory(client, self.key)

    def reset(self) -> None:
        if self.who != "store":
            self.client.delete(self.key, f"{self.key}:meta")
        else:
            self.history.delete()

    def batches(self) -> list[list[Any]]:
        """What one call appends: a turn, or one message."""
        if self.shape == "turn":
            return self.natives
        return [[message] for turn in self.natives for message in turn]

    def run(self) -> None:
        batches = self.batches()
        if self.who in ("script", "empty"):
            evalsha, keys = self.client.evalsha, (self.key, f"{self.key}:meta")
            for batch in batches:
                pushed = [wire_bytes(m) for m in batch]
                evalsha(self.sha, 2, *keys, sum(map(len, pushed)) // 4, *pushed)
        elif self.who == "floor":
            rpush, key = self.client.rpush, self.key
            for batch in batches:
                rpush(key, *[wire_bytes(m) for m in batch])
        elif self.shape == "turn":
            append_many = self.history.append_many
            for natives in batches:
                append_many(natives)
        else:
            append = self.history.append
            for (message,) in batches:
                append(message)

    def measure(self, admin: redis.Redis) -> Cost:
        """This contestant's block, from an empty conversation."""
        self.reset()
        admin.config_resetstat()
        gc.collect()
        server, before = _server_cpu(admin), time.process_time()
        self.run()
        client = time.process_time() - before
        server = _server_cpu(admin) - server
        commands = _commands_usec(admin)
        n = self.messages
        return Cost(server * 1e6 / n, commands / n, client * 1e6 / n)


def appends(url: str, messages: int, runs: int, seed: int) -> dict[tuple[str, str, str], Cost]:
    """The least cost of each (mix, who, shape) over ``runs`` shuffled runs."""
    client = redis.Redis.from_url(url)
    admin = redis.Redis.from_url(url)
    contestants = [
        Contestant(client, who, shape, MIXES[mix](messages))
        for mix in MIXES
        for who in WHO
        for shape in SHAPES
    ]
    mixes = [mix for mix in MIXES for _ in range(len(WHO) * len(SHAPES))]
    for contestant in contestants:  # a warm-up: the scripts loaded, the connections open
        contestant.measure(admin)
    rng = random.Random(seed)
    best: dict[tuple[str, str, str], Cost] = {}
    for _ in range(runs):
        order = list(zip(mixes, contestants, strict=True))
        rng.shuffle(order)
        for mix, contestant in order:
            cost = contestant.measure(admin)
            key = (mix, contestant.who, contestant.shape)
            best[key] = best[key].least(cost) if key in best else cost
    for contestant in contestants:
        contestant.reset()
    return best


def reads(
    url: str, sizes: Sequence[tuple[str, int]], runs: int
) -> dict[tuple[str, int], tuple[float, float]]:
    """Client CPU (ms) of a whole read of a conversation of each mix and size: the store's
    ``snapshot()`` and the floor's ``LRANGE`` and ``json.loads``, the least of ``runs``."""
    client = redis.Redis.from_url(url)
    out: dict[tuple[str, int], tuple[float, float]] = {}
    for mix, size in sizes:
        turns = MIXES[mix](size)
        history = RedisHistory(client, f"bench:read:{mix}:{size}")
        history.delete()
        key = f"bench:read-floor:{mix}:{size}"
        client.delete(key)
        for turn in turns:
            history.append_many([to_message(m) for m in turn])
            client.rpush(key, *[wire_bytes(m.wire) for m in turn])

        def store(history: RedisHistory = history) -> list[Message]:
            return history.snapshot()

        def floor(key: str = key) -> list[Any]:
            return [json.loads(item) for item in client.lrange(key, 0, -1)]

        timed = {"store": float("inf"), "floor": float("inf")}
        for _ in range(runs):
            both: list[tuple[str, Callable[[], object]]] = [("store", store), ("floor", floor)]
            for name, read in random.sample(both, 2):
                gc.collect()
                before = time.process_time()
                read()
                timed[name] = min(timed[name], (time.process_time() - before) * 1e3)
        out[mix, size] = (timed["store"], timed["floor"])
        history.delete()
        client.delete(key)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages per block")
    parser.add_argument("--runs", type=int, default=5, help="runs; each figure the least")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="100 messages, 1 run")
    parser.add_argument("--markdown", action="store_true", help="print the tables only")
    args = parser.parse_args(argv)
    messages, runs = (100, 1) if args.quick else (args.messages, args.runs)
    sizes = (
        [("chat", 100), ("chat", 300), ("tool-heavy", 100)]
        if args.quick
        else [("chat", 1000), ("chat", 5000), ("tool-heavy", 1000)]
    )
    with RedisServer() as server:
        version = server.client().info("server")["redis_version"]
        best = appends(server.url, messages, runs, args.seed)
        read = reads(server.url, sizes, runs)
    if not args.markdown:
        print(f"redis-server {version}, {messages} messages a block, the least of {runs} runs.\n")
    print("| mix | shape | floor server µs/msg | store server µs/msg | server ratio "
          "| commands ratio | floor client µs/msg | store client µs/msg | client ratio "
          "| minimal script's server ratio | empty script's server ratio |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mix in MIXES:
        for shape in SHAPES:
            floor, store = best[mix, "floor", shape], best[mix, "store", shape]
            script, empty = best[mix, "script", shape], best[mix, "empty", shape]
            print(
                f"| {mix} | {shape} | {floor.server:.1f} | {store.server:.1f} "
                f"| {store.server / floor.server:.2f}x | {store.commands / floor.commands:.2f}x "
                f"| {floor.client:.1f} | {store.client:.1f} | {store.client / floor.client:.2f}x "
                f"| {script.server / floor.server:.2f}x | {empty.server / floor.server:.2f}x |"
            )
    print()
    print("| snapshot | floor client ms | store client ms | ratio |")
    print("|---|---:|---:|---:|")
    for (mix, size), (store_ms, floor_ms) in read.items():
        print(
            f"| {mix}, {size:,} messages | {floor_ms:.2f} | {store_ms:.2f} "
            f"| {store_ms / floor_ms:.2f}x |"
        )


if __name__ == "__main__":
    main()
