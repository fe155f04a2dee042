"""Real ``redis-history worker`` processes for the tests, and a patient wait for events.

Shared by tests/test_workers.py, tests/test_compactor_workers.py and
tests/test_worker_faults.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_history import CompactionPolicy

TESTS = Path(__file__).resolve().parent
DEADLINE = 90.0
"""Seconds any awaited event may take before the test fails (never a timing assertion)."""
FAULT_POLICY = CompactionPolicy(
    soft_tokens=100,
    hard_tokens=1_000_000,
    keep_last_turns=1,
    min_messages=2,
    lock_ttl_seconds=1,
    claim_ttl_seconds=2,
)
"""Compacts a few seeded turns, with a lock that expires within a second of a paused worker."""


def wait_for(condition: Callable[[], object], what: str, deadline: float = DEADLINE) -> Any:
    """Poll ``condition`` until it is truthy; fail naming ``what`` if it never is."""
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def started_calls(client: redis.Redis, name: str) -> list[dict[str, Any]]:
    """The calls the Blocking summarizer has announced for ``name``."""
    return [json.loads(raw) for raw in client.lrange(f"test:started:{name}", 0, -1)]


class Workers:
    """``redis-history worker`` processes, each in its own process group, killed at teardown.

    RQ runs each job in a work horse forked into a session of its own, so a
    signal meant for "the worker" goes to the worker's group and to its horse.
    """

    def __init__(
        self,
        client: redis.Redis,
        url: str,
        directory: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Workers on the store at ``url`` (``client`` reaches it too); ``env`` adds variables."""
        self.client = client
        self.url = url
        self.directory = directory
        self.env = dict(env or {})
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(
        self, summarizer: str, *, burst: bool = False, compactor: str | None = None
    ) -> subprocess.Popen[bytes]:
        """A worker running ``worker_doubles.<summarizer>`` (and ``compactor``, an alias or
        dotted path, when given); its output goes to a log file."""
        env = {
            **os.environ,
            "REDIS_HISTORY_URL": self.url,
            "REDIS_HISTORY_SUMMARIZER": f"worker_doubles:{summarizer}",
            "REDIS_HISTORY_TOKEN_COUNTER": "heuristic",
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            **self.env,
        }
        if compactor is not None:
            env["REDIS_HISTORY_COMPACTOR"] = compactor
        log = (self.directory / f"worker-{len(self.processes)}.log").open("wb")
        command = [sys.executable, "-m", "redis_history", "worker"]
        process = subprocess.Popen(
            command + (["--burst"] if burst else []),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the worker and its work horses share one process group
        )
        log.close()
        self.processes.append(process)
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        """What a worker has printed so far."""
        index = self.processes.index(process)
        return (self.directory / f"worker-{index}.log").read_text(errors="replace")

    @staticmethod
    def signal(process: subprocess.Popen[bytes], horse: int, signum: int) -> None:
        """Send ``signum`` to the worker's process group and to its work horse ``horse``."""
        os.kill(horse, signum)
        os.killpg(process.pid, signum)

    def stop_all(self) -> None:
        """SIGKILL every worker process group and every blocked horse still alive."""
        for horse in self.client.smembers("test:horses"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(horse), signal.SIGKILL)
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def refused_after_a_pause(
    workers: Workers,
    queue: Callable[[Any], object],
    history: Any,
    policy: Any,
    compactor: str | None = None,
) -> list[Any]:
    """A ``Blocking`` worker (running ``compactor`` if given) stopped inside its compaction
    until its lock's TTL has passed, while a second worker compacts the conversation; the
    first, woken, must be refused and change nothing. Returns the entries the second left."""
    client = workers.client
    sleeper = workers.start("Blocking", compactor=compactor)
    queue(history.core.compaction_request(policy))
    name = history.conversation_id
    (call,) = wait_for(lambda: started_calls(client, name), "the compaction to start")
    workers.signal(sleeper, call["pid"], signal.SIGSTOP)  # the heartbeat stops with it
    wait_for(lambda: not client.exists(history.keys.lock), "the paused worker's lock to expire")

    queue(history.core.compaction_request(policy))
    other = workers.start("Recording", burst=True)
    assert other.wait(DEADLINE) == 0, workers.log(other)
    after_other: list[Any] = history.entries()
    assert after_other[0].message.metadata.get("summary"), "the other worker compacted"

    workers.signal(sleeper, call["pid"], signal.SIGCONT)
    client.rpush(f"test:release:{name}", "go")
    wait_for(lambda: "lock_lost" in workers.log(sleeper), "the woken worker to be refused")
    assert history.entries() == after_other
    return after_other
