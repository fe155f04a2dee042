"""Compaction latency and throughput: ``maybe_compact`` to the write-back, through one real worker.

Run: ``python benchmarks/bench_compaction.py [--rounds N] [--conversations M] [--mode MODE]
[--quick] [--markdown] [--json PATH]``.

It starts its own ``redis-server`` (keyspace notifications on) and, for each
worker mode, one ``redis-history worker`` process the way a deployment runs it
(``python -m redis_history worker``: the extractive summarizer and the exact
o200k counter, the defaults), forking a work horse per job (RQ's ``Worker``,
the default) or, with ``--no-fork``, running jobs in the worker process.

Latency: one conversation of the realistic mix (``traffic.py``) is filled
just past the default policy's soft limit (60,000 tokens, about 90 messages,
untimed), then the pod calls ``maybe_compact`` with the RQ queue: the real
enqueue path. The clock stops when the write-back is visible: the splice
script's ``RPUSH`` to the conversation's archive, seen by a keyspace
notification on a separate connection that blocks in ``select`` (no polling).
Rounds run one at a time; each waits for the job to finish before the next.

Throughput: ``--conversations`` conversations are filled and enqueued while
no worker runs; then one worker starts and drains them. Compactions per
second are counted from the first write-back to the last, so the worker's
start-up is not included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
import rq
from redis.client import PubSub
from rq.job import Job
from rq.worker import Worker

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import to_message
from traffic import realistic_turns

from redis_history import RedisHistory
from redis_history.compaction.jobs import CompactionQueue, compaction_queue
from redis_history.compaction_policy import CompactionPolicy
from redis_history.demo.server import RedisServer
from redis_history.store.core import CompactionRequest

WORKER_COMMAND = [sys.executable, "-m", "redis_history", "worker"]
"""How a deployment starts a worker (``redis-history worker``)."""
MODES: dict[str, list[str]] = {"fork": [], "no-fork": ["--no-fork"]}
"""Worker modes: the ``redis-history worker`` options of each (``fork`` is the default)."""
NAMESPACE = "bench"
QUEUE = "bench-compaction"
WAIT = 60.0
"""Seconds a write-back or a job may take before the run gives up (not a timing goal)."""
_JOB_LINE = re.compile(r"compaction job=(\S+) .* in ([0-9.]+)s")


@dataclass
class Round:
    """One compaction, timed from the pod's ``maybe_compact`` call."""

    conversation: str
    job_id: str
    messages: int
    tokens: int
    enqueue_ms: float
    """How long ``maybe_compact`` itself took (status, claim, RQ enqueue)."""
    writeback_ms: float
    """From the ``maybe_compact`` call to the splice seen by another client."""
    queued_ms: float | None = None
    """RQ's enqueued_at to started_at (dequeue, and the fork in forking mode)."""
    job_ms: float | None = None
    """The job function as the worker logs it (lock, read, summarize, splice, state)."""
    rq_ms: float | None = None
    """RQ's started_at to ended_at (the job function and RQ's bookkeeping in the horse)."""
    dropped: int | None = None


@dataclass
class ModeResult:
    """What one worker mode measured."""

    mode: str
    rounds: list[Round] = field(default_factory=list)
    throughput_conversations: int = 0
    throughput_seconds: float = 0.0
    throughput_completed: int = 0

    @property
    def per_second(self) -> float:
        """Compactions per second, first write-back to last."""
        if self.throughput_completed < 2 or self.throughput_seconds <= 0:
            return 0.0
        return (self.throughput_completed - 1) / self.throughput_seconds

    def stats(self) -> dict[str, float]:
        """Median, p90 and p99 of the write-back latency, and medians of the parts."""
        latencies = [r.writeback_ms for r in self.rounds]
        out = {
            "median_ms": statistics.median(latencies),
            "p90_ms": percentile(latencies, 90),
            "p99_ms": percentile(latencies, 99),
            "min_ms": min(latencies),
            "enqueue_median_ms": statistics.median(r.enqueue_ms for r in self.rounds),
        }
        for name in ("queued_ms", "job_ms", "rq_ms"):
            values = [v for r in self.rounds if (v := getattr(r, name)) is not None]
            if values:
                out[f"{name.removesuffix('_ms')}_median_ms"] = statistics.median(values)
        return out


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile, interpolated between the closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Conversations:
    """Fills conversations of the realistic mix just past the policy's soft limit."""

    def __init__(self, client: redis.Redis, policy: CompactionPolicy) -> None:
        self.client = client
        self.policy = policy
        self.turns = realistic_turns(2000)
        self.count = 0

    def fill(self, tag: str) -> RedisHistory:
        """A new conversation, its estimate at or above ``soft_tokens`` (state ``Ready``).

        Each starts at another turn of the mix, so the conversations differ.
        """
        self.count += 1
        history = RedisHistory(self.client, f"{tag}-{self.count}", namespace=NAMESPACE)
        history.delete()
        start = self.count * 37 % len(self.turns)
        for turn in self.turns[start:] + self.turns[:start]:
            history.append_many([to_message(m) for m in turn])
            if (history.token_estimate() or 0) >= self.policy.soft_tokens:
                return history
        raise RuntimeError("the traffic mix is too short for the policy's soft limit")


class WorkerProcess:
    """One ``redis-history worker`` process in its own process group, and its log."""

    def __init__(self, url: str, mode: str, directory: Path) -> None:
        self.url = url
        self.mode = mode
        self.log_path = directory / f"worker-{mode}-{time.monotonic_ns()}.log"
        env = {
            **os.environ,
            "REDIS_HISTORY_URL": url,
            "REDIS_HISTORY_QUEUE": QUEUE,
            "REDIS_HISTORY_SUMMARIZER": "extractive",
        }
        env.pop("REDIS_HISTORY_TOKEN_COUNTER", None)  # the default: the exact o200k counter
        env.pop("REDIS_HISTORY_QUEUE_URL", None)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*WORKER_COMMAND, *MODES[mode]],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the worker and its work horses: one process group
            )

    def wait_ready(self, client: redis.Redis, queue: rq.Queue) -> None:
        """Wait until the worker has registered on the queue."""
        end = time.monotonic() + WAIT
        while Worker.count(connection=client, queue=queue) < 1:
            if self.process.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the worker did not start:\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        """What the worker has printed."""
        return self.log_path.read_text(errors="replace")

    def job_seconds(self) -> dict[str, float]:
        """Each job's own duration, from the worker's ``compaction job=... in Xs`` lines."""
        return {m[1]: float(m[2]) for m in _JOB_LINE.finditer(self.log())}

    def stop(self) -> None:
        """A warm shutdown (SIGTERM), then SIGKILL of the group if it lingers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Recorder:
    """The real enqueue path (``CompactionQueue``), noting the jobs it enqueued."""

    def __init__(self, queue: CompactionQueue) -> None:
        self.queue = queue
        self.jobs: list[Job] = []

    def __call__(self, request: CompactionRequest) -> Job:
        job = self.queue(request)
        self.jobs.append(job)
        return job


def wait_writeback(pubsub: PubSub, expected: int) -> list[float]:
    """perf_counter times of the first write-back of ``expected`` distinct archives."""
    seen: dict[str, float] = {}
    end = time.monotonic() + WAIT * max(1, expected // 10)
    while len(seen) < expected:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        now = time.perf_counter()
        if message is not None:
            channel = message["channel"]
            seen.setdefault(channel.decode() if isinstance(channel, bytes) else channel, now)
        elif time.monotonic() > end:
            raise RuntimeError(f"only {len(seen)} of {expected} write-backs seen")
    return sorted(seen.values())


def wait_finished(job: Job) -> Job:
    """``job`` re-read once RQ has recorded it finished; a failed job ends the run."""
    end = time.monotonic() + WAIT
    while True:
        status = job.get_status(refresh=True)
        if status == "failed":
            raise RuntimeError(f"job {job.id} failed: {job.latest_result()}")
        if status == "finished":
            job.refresh()  # type: ignore[no-untyped-call]
            return job
        if time.monotonic() > end:
            raise RuntimeError(f"job {job.id} still {status}")
        time.sleep(0.005)


class Bench:
    """One mode's run: the pod's clients, the queue, the conversations, the workers' logs."""

    def __init__(self, url: str, mode: str, directory: Path) -> None:
        self.url = url
        self.mode = mode
        self.directory = directory
        self.client = redis.Redis.from_url(url)
        self.listener = redis.Redis.from_url(url)
        """A connection of its own for the keyspace notifications."""
        self.queue = compaction_queue(connection=self.client, name=QUEUE)
        self.conversations = Conversations(self.client, CompactionPolicy())

    def close(self) -> None:
        self.client.close()
        self.listener.close()

    def subscribed(self, channel: str, *, pattern: bool = False) -> PubSub:
        """A pubsub on the keyspace channel of one key (or a pattern of keys), confirmed."""
        pubsub: PubSub = self.listener.pubsub()  # type: ignore[no-untyped-call]
        if pattern:
            pubsub.psubscribe(f"__keyspace@0__:{channel}")
        else:
            pubsub.subscribe(f"__keyspace@0__:{channel}")
        while pubsub.get_message(timeout=1.0) is None:
            pass
        return pubsub

    def latency(self, rounds: int, warmup: int) -> list[Round]:
        """``rounds`` compactions (after ``warmup`` untimed ones), one at a time, one worker."""
        worker = WorkerProcess(self.url, self.mode, self.directory)
        try:
            worker.wait_ready(self.client, self.queue)
            out = [self.one_round() for _ in range(warmup + rounds)][warmup:]
        finally:
            worker.stop()
        seconds = worker.job_seconds()
        for r in out:
            r.job_ms = seconds[r.job_id] * 1000 if r.job_id in seconds else None
        return out

    def one_round(self) -> Round:
        """Fill a conversation, ``maybe_compact`` it, wait for its write-back and its job."""
        recorder = Recorder(self.queue)
        history = self.conversations.fill("lat")
        messages, tokens = history.len(), history.token_estimate() or 0
        pubsub = self.subscribed(history.keys.archive)
        began = time.perf_counter()
        scheduled = history.maybe_compact(recorder, self.conversations.policy)
        enqueued = time.perf_counter()
        if not scheduled:
            raise RuntimeError(f"maybe_compact scheduled nothing for {history!r}")
        (seen,) = wait_writeback(pubsub, 1)
        pubsub.close()
        job = wait_finished(recorder.jobs[-1])
        result = job.return_value() or {}
        history.delete()
        return Round(
            history.conversation_id,
            job.id,
            messages,
            tokens,
            (enqueued - began) * 1000,
            (seen - began) * 1000,
            queued_ms=_span(job.enqueued_at, job.started_at),
            rq_ms=_span(job.started_at, job.ended_at),
            dropped=result.get("dropped"),
        )

    def throughput(self, count: int) -> tuple[float, int]:
        """Seconds from the first to the last of ``count`` write-backs queued for a new worker."""
        recorder = Recorder(self.queue)
        tag = f"tp-{self.mode}"
        histories = [self.conversations.fill(tag) for _ in range(count)]
        pubsub = self.subscribed(f"rh:{NAMESPACE}:{{{tag}-*}}:archive", pattern=True)
        for history in histories:
            if not history.maybe_compact(recorder, self.conversations.policy):
                raise RuntimeError(f"maybe_compact scheduled nothing for {history!r}")
        worker = WorkerProcess(self.url, self.mode, self.directory)
        try:
            times = wait_writeback(pubsub, count)
            for job in recorder.jobs:
                wait_finished(job)
        finally:
            worker.stop()
            pubsub.close()
        for history in histories:
            history.delete()
        return times[-1] - times[0], len(times)


def _span(start: Any, end: Any) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds() * 1000


def run_mode(url: str, mode: str, tmp: str, *, rounds: int, warmup: int, count: int) -> ModeResult:
    """Latency rounds with one running worker, then a throughput run with a fresh one."""
    bench = Bench(url, mode, Path(tmp))
    result = ModeResult(mode)
    try:
        result.rounds = bench.latency(rounds, warmup)
        if count:
            seconds, completed = bench.throughput(count)
            result.throughput_conversations = count
            result.throughput_seconds = seconds
            result.throughput_completed = completed
    finally:
        bench.close()
    return result


def versions(client: redis.Redis) -> dict[str, str]:
    """The machine and the versions the numbers depend on."""
    return {
        "python": platform.python_version(),
        "redis-py": redis.__version__,
        "rq": rq.__version__,
        "redis-server": str(client.info("server")["redis_version"]),
        "nproc": str(os.cpu_count()),
        "platform": platform.platform(),
        "load_before": load(),
    }


def load() -> str:
    """The 1-minute load average: other processes on the machine move these numbers."""
    return f"{os.getloadavg()[0]:.2f}"


def markdown(results: Sequence[ModeResult], info: dict[str, str], rounds: int) -> str:
    """The results as a Markdown table."""
    lines = [
        f"Python {info['python']}, redis-py {info['redis-py']}, rq {info['rq']}, "
        f"redis-server {info['redis-server']}, {info['nproc']} CPUs; {rounds} rounds per mode; "
        f"load average {info['load_before']} before, {info['load_after']} after.",
        "",
        "| worker | median | p90 | p99 | maybe_compact | queued (RQ) | job (RQ) "
        "| compactions/s, one worker |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        s = r.stats()
        name = "forking (default)" if r.mode == "fork" else "`--no-fork`"
        per_second = f"{r.per_second:.1f}" if r.throughput_completed else "-"
        lines.append(
            f"| {name} | {s['median_ms']:.1f} ms | {s['p90_ms']:.1f} ms | {s['p99_ms']:.1f} ms "
            f"| {s['enqueue_median_ms']:.2f} ms | {_ms(s.get('queued_median_ms'))} "
            f"| {_ms(s.get('rq_median_ms'))} | {per_second} |"
        )
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


@contextlib.contextmanager
def server_with_notifications() -> Iterator[RedisServer]:
    """A ``redis-server`` of its own that publishes list events as keyspace notifications."""
    with RedisServer(extra_args=["--notify-keyspace-events", "Kl"]) as server:
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=200, help="timed compactions per mode")
    parser.add_argument(
        "--conversations", type=int, default=100, help="queued at once for the throughput run"
    )
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="a few rounds: does it run")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args(argv)
    rounds, count, warmup = args.rounds, args.conversations, 3
    if args.quick:
        rounds, count, warmup = 5, 4, 1
    modes = list(MODES) if args.mode == "both" else [args.mode]
    with server_with_notifications() as server, tempfile.TemporaryDirectory() as tmp:
        client = server.client()
        info = versions(client)
        client.close()
        results = [
            run_mode(server.url, mode, tmp, rounds=rounds, warmup=warmup, count=count)
            for mode in modes
        ]
    info["load_after"] = load()
    if args.markdown:
        print(markdown(results, info, rounds))
    else:
        for r in results:
            s = r.stats()
            print(
                f"{r.mode:8} median {s['median_ms']:.1f} ms, p90 {s['p90_ms']:.1f} ms, "
                f"p99 {s['p99_ms']:.1f} ms, {r.per_second:.1f} compactions/s "
                f"({r.throughput_completed} of {r.throughput_conversations})"
            )
    if args.json:
        payload = {
            "versions": info,
            "rounds": rounds,
            "results": [
                {
                    "mode": r.mode,
                    **r.stats(),
                    "compactions_per_second": r.per_second,
                    "throughput_conversations": r.throughput_conversations,
                    "throughput_completed": r.throughput_completed,
                    "throughput_seconds": r.throughput_seconds,
                    "rounds": [asdict(x) for x in r.rounds],
                }
                for r in results
            ],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
