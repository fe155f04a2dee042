"""A worker's Prometheus metrics: counted in the worker's process, also when jobs run in forks."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from samples import turns
from test_docs import ROOT, blocks
from worker_doubles import InProcessWorker
from worker_processes import Workers, wait_for

from redis_history import RedisHistory
from redis_history.compaction.jobs import (
    CompactionQueue,
    WorkerSettings,
    compaction_queue,
    configure_worker,
)
from redis_history.compaction.metrics import OUTCOMES, WorkerMetrics
from redis_history.compaction_policy import CompactionPolicy
from redis_history.demo.server import free_port

pytestmark = pytest.mark.usefixtures("signal_handlers")

POLICY = CompactionPolicy(
    soft_tokens=50, hard_tokens=10_000, keep_last_turns=1, min_messages=2, cooldown_turns=0
)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scripted_jobs(client: redis.Redis | fakeredis.FakeRedis, queue: CompactionQueue) -> None:
    """Enqueue one job that compacts, one that finds nothing due, and one forged job."""
    due = RedisHistory(client, "long", namespace="tenant", token_counter="heuristic")
    due.append_many(turns(6))
    assert due.maybe_compact(queue, POLICY)
    short = RedisHistory(client, "short", namespace="tenant", token_counter="heuristic")
    short.append_many(turns(1))
    queue(short.core.compaction_request(POLICY))
    queue.enqueue_call("os.getcwd")  # refused by the allowlist: a failed job


def parsed(text: str) -> Samples:
    """The samples of a Prometheus text exposition, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def outcome(samples: Samples, name: str) -> float:
    """The ``redis_history_compactions_total`` sample of ``name``."""
    return samples[("redis_history_compactions_total", frozenset({("outcome", name)}))]


def check_scripted_counts(samples: Samples) -> None:
    """What :func:`scripted_jobs` must have counted once a worker ran them."""
    assert {name: outcome(samples, name) for name in OUTCOMES} == {
        **dict.fromkeys(OUTCOMES, 0.0),
        "compacted": 1.0,
        "skipped": 1.0,
        "failed": 1.0,
    }
    assert samples[("redis_history_tokens_freed_total", frozenset())] > 0
    assert samples[("redis_history_messages_dropped_total", frozenset())] > 0
    for name in ("compacted", "skipped", "failed"):
        key = ("redis_history_compaction_duration_seconds_count", frozenset({("outcome", name)}))
        assert samples[key] == 1.0
    assert samples[("redis_history_heartbeat_failures_total", frozenset())] == 0.0


@pytest.fixture
def store() -> Iterator[fakeredis.FakeRedis]:
    """A fake store the in-process worker's jobs use, with the extractive summarizer."""
    client = fakeredis.FakeRedis()
    configure_worker(WorkerSettings(token_counter="heuristic"), store=client)
    yield client
    configure_worker(None)


def test_an_in_process_worker_counts_each_outcome_tokens_and_durations(
    store: fakeredis.FakeRedis,
) -> None:
    """Jobs run in the worker's process are counted by outcome, with what they freed."""
    queue = compaction_queue(store, "compaction")
    scripted_jobs(store, queue)
    worker = InProcessWorker([queue], connection=store)
    metrics = WorkerMetrics(queue.name, lambda: (queue.count, 0))
    worker.metrics = metrics
    assert worker.work(burst=True)
    check_scripted_counts(
        {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in metrics.registry.collect()
            for sample in family.samples
        }
    )


def test_the_queue_depth_is_read_when_scraped_and_left_out_when_unreadable() -> None:
    """The depth gauge reports queued and started jobs, and no sample (not an error) when the
    queue's Redis cannot be read."""
    depths: list[tuple[int, int]] = [(3, 1)]

    def depth() -> tuple[int, int]:
        if not depths:
            raise redis.ConnectionError("down")
        return depths[0]

    metrics = WorkerMetrics("compaction", depth)
    registry = metrics.registry
    labels = {"queue": "compaction", "state": "queued"}
    assert registry.get_sample_value("redis_history_queue_depth", labels) == 3
    assert registry.get_sample_value("redis_history_queue_depth", {**labels, "state": "started"})
    depths.clear()
    assert registry.get_sample_value("redis_history_queue_depth", labels) is None


def test_the_depth_of_every_queue_the_worker_serves_is_reported() -> None:
    """A worker serving tenants' queues reports each one's depth, under its own name; one
    that cannot be read is left out, the others still reported."""
    metrics = WorkerMetrics("redis-history", lambda: (1, 0))
    metrics.watch("redis-history:tenant-a", lambda: (4, 1))

    def unreadable() -> tuple[int, int]:
        raise redis.ConnectionError("down")

    metrics.watch("redis-history:tenant-b", unreadable)
    depth = metrics.registry.get_sample_value
    queued = {"state": "queued"}
    assert depth("redis_history_queue_depth", {**queued, "queue": "redis-history"}) == 1
    assert depth("redis_history_queue_depth", {**queued, "queue": "redis-history:tenant-a"}) == 4
    assert depth("redis_history_queue_depth", {**queued, "queue": "redis-history:tenant-b"}) is None


@pytest.mark.real_redis
@pytest.mark.slow
def test_a_forking_worker_counts_the_jobs_its_work_horses_ran(
    redis_url: str, real_redis: redis.Redis, tmp_path: Path
) -> None:
    """A real `redis-history worker` process (a work horse forked per job), configured by
    REDIS_HISTORY_METRICS_PORT, serves at /metrics the outcomes its horses produced."""
    port = free_port()
    env = {"REDIS_HISTORY_SUMMARIZER": "extractive", "REDIS_HISTORY_METRICS_PORT": str(port)}
    workers = Workers(real_redis, redis_url, tmp_path, env=env)
    queue = compaction_queue(real_redis, "redis-history")
    scripted_jobs(real_redis, queue)
    try:
        worker = workers.start("Recording")

        def scrape() -> Samples | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    samples = parsed(r.read().decode())
            except OSError:
                return None  # not listening yet
            done = sum(outcome(samples, name) for name in OUTCOMES)
            return samples if done == 3 else None

        samples = wait_for(scrape, "the worker to count three jobs")
        assert worker.poll() is None, workers.log(worker)
        check_scripted_counts(samples)
        depth = ("redis_history_queue_depth", frozenset({("queue", "redis-history")}))
        assert samples[(depth[0], depth[1] | {("state", "queued")})] == 0
        assert "process_resident_memory_bytes" in {name for name, _ in samples}
    finally:
        workers.stop_all()


def documented_scrape() -> str:
    """The metrics line of the operations page's walk-through (the bash block after "Last,
    read the workers' metrics")."""
    page = ROOT / "docs" / "operations.md"
    lines = page.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Last, read the workers'"))
    block = next(b for b in blocks(page) if b.lang == "bash" and b.line > start)
    (line,) = block.code.splitlines()
    return line


@pytest.mark.real_redis
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the documented line uses curl")
def test_the_documented_scrape_reads_a_real_workers_counts(
    redis_url: str, real_redis: redis.Redis, tmp_path: Path
) -> None:
    """The walk-through's curl line, pointed at a real worker's port, prints its compaction
    counts by outcome."""
    line = documented_scrape()
    assert "localhost:9121/metrics" in line
    port = free_port()
    env = {"REDIS_HISTORY_SUMMARIZER": "extractive", "REDIS_HISTORY_METRICS_PORT": str(port)}
    workers = Workers(real_redis, redis_url, tmp_path, env=env)
    scripted_jobs(real_redis, compaction_queue(real_redis, "redis-history"))
    try:
        workers.start("Recording")

        def scraped() -> str | None:
            done = subprocess.run(
                ["bash", "-c", line.replace("localhost:9121", f"127.0.0.1:{port}")],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            return done.stdout if 'outcome="failed"} 1.0' in done.stdout else None

        printed = wait_for(scraped, "the worker's counts").splitlines()
    finally:
        workers.stop_all()
    assert 'redis_history_compactions_total{outcome="compacted"} 1.0' in printed
    assert all(row.startswith("redis_history_compactions_total{") for row in printed)
    assert len(printed) == len(OUTCOMES)
