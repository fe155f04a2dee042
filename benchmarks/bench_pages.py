"""What one page of a whole read costs Redis at its worst, and what a whole read sends.

Run: ``python benchmarks/bench_pages.py [--repeat K]``.

A read sends no ``LRANGE`` of more than ``PAGE_ENTRIES`` entries (``store/_pages.py``), and a
stored entry is at most ``MAX_MESSAGE_BYTES``: the worst page is ``PAGE_ENTRIES`` entries of
1 MiB. A ``redis-server`` of its own (on a free port) holds such a list; ``SLOWLOG`` (its
threshold 0) gives the server's time for each of ``--repeat`` such ``LRANGE`` calls (least
and greatest printed: the least is the work, the rest is the machine). Then a conversation of
1,000 short messages is read whole by ``snapshot()`` and the commands it sent are counted.
"""

from __future__ import annotations

import argparse
import os

from redis_history import Message, RedisHistory
from redis_history.demo.server import RedisServer
from redis_history.limits import MAX_MESSAGE_BYTES
from redis_history.store._pages import PAGE_ENTRIES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with RedisServer() as server:
        client = server.client()
        entry = os.urandom(MAX_MESSAGE_BYTES // 2).hex().encode()
        for _ in range(PAGE_ENTRIES):
            client.rpush("worst", entry)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        client.slowlog_reset()
        for _ in range(args.repeat):
            client.lrange("worst", 0, PAGE_ENTRIES - 1)
        times = [
            e["duration"] for e in client.slowlog_get(1_000) if e["command"].startswith(b"LRANGE")
        ]
        mib = PAGE_ENTRIES * MAX_MESSAGE_BYTES / (1 << 20)
        print(
            f"LRANGE of {PAGE_ENTRIES} entries of {MAX_MESSAGE_BYTES:,} bytes ({mib:.0f} MiB): "
            f"least {min(times) / 1000:.1f} ms, greatest {max(times) / 1000:.1f} ms "
            f"of {len(times)} (SLOWLOG)"
        )
        history = RedisHistory(client, "c")
        history.append_many(
            [
                Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}")
                for i in range(1000)
            ]
        )
        client.slowlog_reset()
        history.snapshot()
        sent = [e["command"].split()[0].decode() for e in client.slowlog_get(1_000)][:-1]
        print(
            f"snapshot() of 1,000 messages: {len(sent)} commands "
            f"({sent.count('LRANGE')} LRANGE, {sent.count('HGET')} HGET, {sent.count('LLEN')} LLEN)"
        )


if __name__ == "__main__":
    main()
