"""Instructions redis-server executes per command, counted by valgrind's callgrind.

Run: ``python benchmarks/bench_instructions.py [--calls N]`` (needs ``valgrind``).

Wall-clock ratios on a virtual machine move with how fast an idle CPU wakes
and with what its neighbours run; instruction counts do not, so this is the
repeatable view of what the scripts cost inside Redis. Each cell runs its own
``redis-server`` under callgrind, warms up (loading the script), zeroes the
counters, then counts ``processCommand``: the command and everything a script
calls, without the socket I/O every command shares.

Three contestants store the same messages in order (``traffic.py``: the short
run and the realistic agent mix), one message or one whole turn per call:

- the store: ``RedisHistory.append`` / ``append_many`` at default settings;
- a minimal scripted append, the floor of any atomic scripted write: one script
  that ``RPUSH``es the store's own envelopes and ``HINCRBY``s a token total
  (the yardstick: the store should stay within 2x of it);
- a bare ``RPUSH`` of the chat-completions JSON.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import MINIMAL_SCRIPT, to_message
from traffic import Msg, Turn, realistic_turns, short_turns

from redis_history import Message, RedisHistory
from redis_history.demo.server import find_redis_server, free_port
from redis_history.store.codec import encode_message

WARMUP = 50

Operation = Callable[[redis.Redis], Callable[[int], object]]
"""Given a client, the call to count: ``call(i)`` stores the ``i``-th message or turn."""

MINIMAL = MINIMAL_SCRIPT
"""The minimal scripted append: the envelopes pushed and the token total bumped."""


def _messages(turn: Sequence[Msg]) -> list[Message]:
    return [to_message(m) for m in turn]


def _batches(turns: Sequence[Turn], per_turn: bool, count: int) -> list[list[Message]]:
    """``count`` calls' worth of messages, in order: whole turns, or one message each."""
    batches = [_messages(turn) for turn in turns] if per_turn else [
        [m] for turn in turns for m in _messages(turn)
    ]  # fmt: skip
    if len(batches) < count:
        raise ValueError(f"the traffic holds {len(batches)} calls, {count} asked")
    return batches[:count]


def store(batches: list[list[Message]]) -> Operation:
    def setup(client: redis.Redis) -> Callable[[int], object]:
        history = RedisHistory(client, "store")
        return lambda i: history.append_many(batches[i])

    return setup


def minimal(batches: list[list[Message]]) -> Operation:
    def setup(client: redis.Redis) -> Callable[[int], object]:
        history = RedisHistory(client, "minimal")
        sha = client.script_load(MINIMAL)
        keys = (history.keys.msgs, history.keys.meta)
        core = history.core
        calls: list[list[str | bytes | int]] = []
        for batch in batches:
            encoded = [encode_message(m, core.counter, core.max_message_bytes) for m in batch]
            tokens = sum(count for _, count in encoded)
            calls.append([*keys, tokens, *(envelope for envelope, _ in encoded)])
        return lambda i: client.evalsha(sha, 2, *calls[i])

    return setup


def rpush(turns: Sequence[Turn], per_turn: bool, count: int) -> Operation:
    bodies = [[m.wire_json() for m in turn] for turn in turns] if per_turn else [
        [m.wire_json()] for turn in turns for m in turn
    ]  # fmt: skip

    def setup(client: redis.Redis) -> Callable[[int], object]:
        return lambda i: client.rpush("raw", *bodies[i])

    return setup


def instructions_per_call(operation: Operation, calls: int) -> float:
    """Instructions in ``processCommand`` per call of ``operation``, after a warm-up."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="rh-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        process = subprocess.Popen(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                "--toggle-collect=processCommand",
                find_redis_server(), "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", tmp,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client = _connect(port, process)
            call = operation(client)
            for i in range(WARMUP):
                call(i)
            subprocess.run(["callgrind_control", "--zero", str(process.pid)], check=True,
                           capture_output=True)  # fmt: skip
            for i in range(WARMUP, WARMUP + calls):
                call(i)
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # SHUTDOWN closes the connection
        finally:
            process.wait(60)
        text = out.read_text()
    match = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError("callgrind wrote no totals")
    return int(match.group(1)) / calls


def _connect(port: int, process: subprocess.Popen[bytes]) -> redis.Redis:
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.ping()
        except redis.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
        else:
            return client


ROWS = (
    ("short messages, one per call", short_turns, False),
    ("short messages, a turn per call", short_turns, True),
    ("realistic mix, one message per call", realistic_turns, False),
    ("realistic mix, a turn per call", realistic_turns, True),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    count = WARMUP + args.calls
    print(f"instructions per call in redis-server's processCommand, {args.calls} calls\n")
    print("| traffic | store | minimal script | RPUSH | store / minimal | store / RPUSH |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, make, per_turn in ROWS:
        turns = make(count * (6 if per_turn else 1) + 10)
        batches = _batches(turns, per_turn, count)
        s = instructions_per_call(store(batches), args.calls)
        m = instructions_per_call(minimal(batches), args.calls)
        f = instructions_per_call(rpush(turns, per_turn, count), args.calls)
        print(f"| {name} | {s:,.0f} | {m:,.0f} | {f:,.0f} | {s / m:.2f}x | {s / f:.1f}x |")


if __name__ == "__main__":
    main()
