"""A compaction worker's Prometheus metrics, served as text at ``/metrics``.

Needs ``prometheus_client`` (the ``metrics`` extra); only a worker started with a
metrics port imports this module. Everything is counted in the worker's own
process: a forking worker runs each job in a work horse that exits after it, so
what a horse counted would die with it. The worker reads each job's outcome from
RQ (its status, and the result the job returned) once the horse is gone, and
records it here; the queue depth is read from Redis at each scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["EXTRACTION_OUTCOMES", "OUTCOMES", "WorkerMetrics"]

logger = logging.getLogger(__name__)

OUTCOMES = ("compacted", "skipped", "busy", "exhausted", "stale", "lock_lost", "failed")
"""The ``outcome`` label's values: a :class:`~redis_history.compaction.run.CompactionResult`
status, or ``failed`` for a job that raised, was refused, timed out or whose horse died."""

EXTRACTION_OUTCOMES = ("extracted", "nothing", "busy", "lost", "failed")
"""The ``outcome`` label of memory extraction jobs: the job's status, or ``failed``."""
FACT_OUTCOMES = ("added", "merged", "superseded", "deleted")
"""The ``outcome`` label of extracted facts: a new memory, merged into one that said the
same, a new memory superseding the one it updates, or a memory forgotten."""

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""From a skipped job (milliseconds) to an LLM summary near the default job timeout."""


class _QueueDepth(Collector):
    """``redis_history_queue_depth`` of each queue watched, read from Redis when scraped; a
    queue is absent while its Redis is unreachable."""

    def __init__(self, queue: str, depth: Callable[[], tuple[int, int]]) -> None:
        self.queues = [(queue, depth)]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "redis_history_queue_depth",
            "Compaction jobs waiting in the queue (state=queued) or running (state=started).",
            labels=["queue", "state"],
        )
        for queue, depth in self.queues:
            try:
                queued, started = depth()
            except Exception as exc:  # a scrape during an outage: no sample rather than an error
                logger.debug("queue depth unavailable: %s: %s", type(exc).__name__, exc)
                continue
            family.add_metric([queue, "queued"], queued)
            family.add_metric([queue, "started"], started)
        if family.samples:
            yield family


class WorkerMetrics:
    """The counters of one worker process, in a registry of their own.

    Args:
        queue: the queue's name, the ``queue`` label of the queue depth.
        depth: reads ``(queued, started)`` job counts from the queue's Redis.
    """

    def __init__(self, queue: str, depth: Callable[[], tuple[int, int]]) -> None:
        self.registry = CollectorRegistry()
        """What ``/metrics`` serves: these metrics and the process's (CPU, memory, fds)."""
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR):
            self.registry.register(collector)
        self.compactions = Counter(
            "redis_history_compactions",
            "Compaction jobs this worker ran, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "redis_history_compaction_duration_seconds",
            "Wall time of a compaction job as the worker saw it (fork and bookkeeping included).",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.tokens_freed = Counter(
            "redis_history_tokens_freed",
            "Estimated tokens the compacted conversations shrank by.",
            registry=self.registry,
        )
        self.messages_dropped = Counter(
            "redis_history_messages_dropped",
            "Live messages compactions replaced (archived, not lost).",
            registry=self.registry,
        )
        self.heartbeat_failures = Counter(
            "redis_history_heartbeat_failures",
            "Heartbeats to the queue's Redis that failed (outages the worker rode out).",
            registry=self.registry,
        )
        self.extractions = Counter(
            "redis_history_extractions",
            "Memory extraction jobs this worker ran, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.facts = Counter(
            "redis_history_facts_extracted",
            "Facts the extraction jobs kept, by what became of them.",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # every series exists from the start, at 0
            self.compactions.labels(outcome)
        for outcome in EXTRACTION_OUTCOMES:
            self.extractions.labels(outcome)
        for outcome in FACT_OUTCOMES:
            self.facts.labels(outcome)
        self._depths = _QueueDepth(queue, depth)
        self.registry.register(self._depths)

    def watch(self, queue: str, depth: Callable[[], tuple[int, int]]) -> None:
        """Report the depth of another queue the worker serves (a tenant's) too."""
        self._depths.queues.append((queue, depth))

    def job_done(self, outcome: str, seconds: float, result: Any = None) -> None:
        """Count one job: its ``outcome`` (one of :data:`OUTCOMES`), its wall time, and what
        its result (the job's return value, a dict) says it freed."""
        self.compactions.labels(outcome).inc()
        self.duration.labels(outcome).observe(seconds)
        if isinstance(result, dict):
            self.tokens_freed.inc(max(0, int(result.get("tokens_freed") or 0)))
            self.messages_dropped.inc(max(0, int(result.get("dropped") or 0)))

    def extraction_done(self, outcome: str, result: Any = None) -> None:
        """Count one memory extraction job: its ``outcome`` (one of
        :data:`EXTRACTION_OUTCOMES`) and what its result says became of its facts
        (:data:`FACT_OUTCOMES`)."""
        self.extractions.labels(outcome).inc()
        if isinstance(result, dict):
            for fact in FACT_OUTCOMES:
                self.facts.labels(fact).inc(max(0, int(result.get(fact) or 0)))

    def heartbeat_failed(self) -> None:
        """Count a heartbeat the queue's Redis did not take."""
        self.heartbeat_failures.inc()

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` on ``address:port`` from a daemon thread of this process."""
        start_http_server(port, addr=address, registry=self.registry)
