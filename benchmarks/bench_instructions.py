"""Instructions redis-server executes per command, counted by valgrind's callgrind.

Run: ``python benchmarks/bench_instructions.py [--calls N]`` (needs ``valgrind``).

Wall-clock ratios on a virtual machine move with how fast an idle CPU wakes
and with what its neighbours run; instruction counts do not, so this is the
repeatable view of what the scripts cost inside Redis. Each row runs its own
``redis-server`` under callgrind, warms up (loading the script), zeroes the
counters, then counts ``processCommand``: the command and everything a script
calls, without the socket I/O every command shares.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from redis_history import Message, RedisHistory, ToolCall
from redis_history._server import find_redis_server, free_port

WARMUP = 50

Operation = Callable[[redis.Redis], Callable[[int], object]]


def _pair() -> list[Message]:
    return [
        Message.user("What is the weather in Lisbon tomorrow morning?"),
        Message.assistant("Sunny, 21 °C."),
    ]


def rpush(client: redis.Redis) -> Callable[[int], object]:
    body = _pair()[0].model_dump_json()
    return lambda i: client.rpush("raw", body)


def fresh(message: Message, i: int) -> Message:
    """``message`` under a new id: a message appended twice is stored once, so a benchmark
    that repeated one would count the exactly-once check, not the append."""
    return message.model_copy(update={"id": f"{message.id}-{i}"})


def append(client: redis.Redis) -> Callable[[int], object]:
    history, pair = RedisHistory(client, "append", token_counter="heuristic"), _pair()
    return lambda i: history.append(fresh(pair[i % 2], i))


def append_turn(client: redis.Redis) -> Callable[[int], object]:
    history = RedisHistory(client, "turn", token_counter="heuristic")
    turn = [
        Message.user("Fares from Lisbon to Osaka?"),
        Message.assistant("", tool_calls=[ToolCall(id="c1", name="fares", arguments={})]),
        Message.tool('{"fares": [790]}', tool_call_id="c1"),
        Message.assistant("790 EUR."),
    ]
    return lambda i: history.append_many([fresh(m, i) for m in turn])


def rpush_turn(client: redis.Redis) -> Callable[[int], object]:
    bodies = [Message.user("Fares?").model_dump_json()] * 4
    return lambda i: client.rpush("raw", *bodies)


ROWS: list[tuple[str, Operation, Operation]] = [
    ("append one message", append, rpush),
    ("append_many, a 4-message turn with a tool call", append_turn, rpush_turn),
]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    print(f"instructions per call in redis-server's processCommand, {args.calls} calls\n")
    print("| operation | store | floor | floor command | ratio |")
    print("|---|---:|---:|---|---:|")
    for name, store, floor in ROWS:
        s = instructions_per_call(store, args.calls)
        f = instructions_per_call(floor, args.calls)
        print(f"| {name} | {s:,.0f} | {f:,.0f} | RPUSH | {s / f:.1f}x |")


if __name__ == "__main__":
    main()
