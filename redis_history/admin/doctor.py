"""Is the deployment healthy? ``redis-history doctor``.

Each :class:`Check` is ``ok``, a ``warning`` (works, but loses something: no AOF, no worker
listening yet, failed jobs) or a ``problem`` (the store cannot keep its promises: a policy that
evicts keys, a Redis too old, a cluster with slots uncovered, a queue that cannot be reached, a
script that does not load). The store's checks run on every primary of a cluster. The queue's
run on the RQ queue pods enqueue on (``compaction_queue``), imported only when it is checked:
nothing else of this package needs RQ.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Literal

import redis

from redis_history import settings
from redis_history.admin.scripts import server_major
from redis_history.admin.target import CONNECT_TIMEOUT, Target
from redis_history.errors import AccessDeniedError, HistoryError, StoreUnavailableError
from redis_history.redact import Redactor, redact_url
from redis_history.wire import RedisFailure, redis_error
from redis_history.wire.scripts import library, script, script_names

__all__ = [
    "MIN_VERSION",
    "Check",
    "Report",
    "Status",
    "diagnose",
    "doctor",
]

Status = Literal["ok", "warning", "problem"]

MIN_VERSION = (6, 2)
"""The oldest Redis the store runs on (``LPOP`` with a count, ``EVAL`` with cjson)."""
CLUSTER_SLOTS = 16384
_CJSON = "return cjson.decode(ARGV[1])[1]"
"""A script only a Redis whose Lua has cjson (which the store's scripts use) answers."""
_LAST_ERROR = 300
"""At most this many characters of a failed job's error are shown."""


@dataclass(frozen=True, slots=True)
class Check:
    """One thing the doctor looked at."""

    name: str
    status: Status
    detail: str


@dataclass(slots=True)
class Report:
    """What the doctor found."""

    store: str
    """The store's URL, its password masked."""
    checks: list[Check] = field(default_factory=list)
    error: HistoryError | None = None
    """Why the store could not be checked at all (unreachable, credentials refused)."""

    @property
    def healthy(self) -> bool:
        """No problem found (warnings allowed), and the store answered."""
        return self.error is None and all(c.status != "problem" for c in self.checks)

    def add(self, name: str, status: Status, detail: str) -> None:
        """Record one check."""
        self.checks.append(Check(name, status, detail))

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return {
            "healthy": self.healthy,
            "store": self.store,
            "checks": [asdict(check) for check in self.checks],
        }


def doctor(
    url: str | None = None,
    *,
    cluster: bool = False,
    queue_url: str | None = None,
    queue: str | None = None,
) -> Report:
    """Check the deployment whose store is at ``url`` (``REDIS_HISTORY_URL`` by default).

    A store that cannot be reached, or that refuses the credentials, is a report with one
    failed ``connection`` check and its :attr:`Report.error`; nothing raises for it.
    """
    url = url or settings.URL.read()
    try:
        target = Target.connect(url, cluster=cluster)
    except (StoreUnavailableError, AccessDeniedError) as exc:
        report = Report(redact_url(url), error=exc)
        report.add("connection", "problem", exc.message)
        return report
    try:
        return diagnose(target, queue_url=queue_url, queue=queue)
    finally:
        target.close()


def diagnose(target: Target, *, queue_url: str | None = None, queue: str | None = None) -> Report:
    """Check the store of ``target`` and the compaction queue.

    Args:
        target: the store.
        queue_url: the queue's Redis; ``REDIS_HISTORY_QUEUE_URL``, else the store (unless
            it is a cluster), when ``None``.
        queue: the queue's name; ``REDIS_HISTORY_QUEUE`` when ``None``.
    """
    report = Report(target.shown)
    redactor = settings.redactor([target.url, queue_url])
    try:
        nodes = target.primaries()
        for node in nodes:
            node.ping()
    except RedisFailure as exc:
        report.error = redis_error(exc, redactor, where=f"Redis at {target.shown}")
        report.add("connection", "problem", report.error.message)
        return report
    count = f"{len(nodes)} primaries" if target.cluster else "standalone"
    report.add("connection", "ok", f"connected and authenticated ({count})")
    checks: list[tuple[str, Callable[[], None]]] = [
        ("server", partial(_server, nodes, report)),
        ("maxmemory-policy", partial(_eviction, nodes, report)),
        ("persistence", partial(_persistence, nodes, report)),
        ("scripts", partial(_scripts, nodes, report)),
    ]
    if target.cluster:
        checks.insert(1, ("cluster", partial(_slots, target, report)))
    for name, check in checks:
        _guarded(report, name, redactor, check)
    _queue(target, report, redactor, queue_url, queue)
    return report


def _guarded(report: Report, name: str, redactor: Redactor, check: Callable[[], None]) -> None:
    """Run ``check``; a Redis error it meets is a problem of ``name``."""
    try:
        check()
    except RedisFailure as exc:
        report.add(name, "problem", redis_error(exc, redactor).message)


def _info(nodes: Iterable[redis.Redis], section: str) -> list[dict[str, Any]]:
    return [node.info(section) for node in nodes]


def _server(nodes: list[redis.Redis], report: Report) -> None:
    versions = sorted({str(info["redis_version"]) for info in _info(nodes, "server")})
    oldest = min(tuple(int(p) for p in v.split(".")[:2]) for v in versions)
    shown = ", ".join(versions)
    if oldest < MIN_VERSION:
        needed = ".".join(map(str, MIN_VERSION))
        report.add("server", "problem", f"Redis {shown}: the store needs {needed} or later")
    else:
        report.add("server", "ok", f"Redis {shown}")


def _eviction(nodes: list[redis.Redis], report: Report) -> None:
    infos = _info(nodes, "memory")
    policies = sorted({str(info.get("maxmemory_policy")) for info in infos})
    evicted = sum(int(stats.get("evicted_keys", 0)) for stats in _info(nodes, "stats"))
    since = f"; {evicted} keys evicted since the server started" if evicted else ""
    if policies != ["noeviction"]:
        report.add(
            "maxmemory-policy",
            "problem",
            f"{', '.join(policies)} evicts keys: a conversation whose meta hash is evicted "
            f"refuses every write (CorruptHistoryError); set maxmemory-policy noeviction{since}",
        )
    else:
        limit = max(int(info.get("maxmemory", 0)) for info in infos)
        shown = f"maxmemory {limit} bytes" if limit else "no maxmemory"
        report.add("maxmemory-policy", "ok", f"noeviction, {shown}{since}")


def _persistence(nodes: list[redis.Redis], report: Report) -> None:
    infos = _info(nodes, "persistence")
    off = sum(1 for info in infos if not int(info.get("aof_enabled", 0)))
    failed = sum(1 for info in infos if info.get("rdb_last_bgsave_status", "ok") != "ok")
    if off:
        where = f" on {off} of {len(infos)} primaries" if len(infos) > 1 else ""
        report.add(
            "persistence",
            "warning",
            f"AOF off{where}: a crash loses every write since the last snapshot "
            "(appendonly yes bounds the loss to a second)",
        )
    elif failed:
        report.add("persistence", "warning", f"the last RDB save failed on {failed} primaries")
    else:
        report.add("persistence", "ok", "AOF on")


def _slots(target: Target, report: Report) -> None:
    info = target.client.cluster_info()
    state, assigned = info.get("cluster_state"), int(info.get("cluster_slots_assigned", 0))
    failing = int(info.get("cluster_slots_fail", 0)) + int(info.get("cluster_slots_pfail", 0))
    detail = f"state {state}, {assigned} of {CLUSTER_SLOTS} slots assigned, {failing} failing"
    healthy = state == "ok" and assigned == CLUSTER_SLOTS and not failing
    report.add("cluster", "ok" if healthy else "problem", detail)


def _scripts(nodes: list[redis.Redis], report: Report) -> None:
    names = script_names()
    for node in nodes:
        for name in names:
            lua = script(name)
            if node.script_load(lua.source) != lua.sha:
                report.add("scripts", "problem", f"{name} loaded under another SHA1")
                return
        if node.eval(_CJSON, 0, "[1]") != 1:
            report.add("scripts", "problem", "Lua's cjson does not answer as Redis's does")
            return
    report.add("scripts", "ok", f"the store's {len(names)} scripts load")
    lib = library()
    with_functions = [node for node in nodes if server_major(node) >= 7]
    missing = sum(
        not node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", lib.name)  # type: ignore[no-untyped-call]
        for node in with_functions
    )
    if missing:
        where = f" on {missing} of {len(with_functions)} primaries" if len(nodes) > 1 else ""
        report.add(
            "functions",
            "warning",
            f"the store's functions ({lib.name}) are not loaded{where}: a tenant's calls run "
            "them (redis-history load-scripts)",
        )
    elif with_functions:
        report.add("functions", "ok", f"the store's functions are loaded ({lib.name})")


def _queue(
    target: Target,
    report: Report,
    redactor: Redactor,
    queue_url: str | None,
    name: str | None,
) -> None:
    """The queue's Redis, its workers, its depth and its failed jobs."""
    from redis_history.compaction.jobs import (  # noqa: PLC0415  (rq only when it is checked)
        compaction_queue,
    )

    name = name or settings.QUEUE.read()
    url = queue_url or settings.QUEUE_URL.read()
    if url is None and target.cluster:
        report.add(
            "queue",
            "problem",
            f"the store is a cluster and no queue Redis is set: RQ needs a standalone Redis "
            f"({settings.QUEUE_URL.name}, or --queue-url)",
        )
        return
    connection = (
        redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT) if url else target.client
    )
    where = f"Redis at {redact_url(url)}" if url else "the store"
    try:
        queue = compaction_queue(connection, name)
        connection.ping()
        report.add("queue", "ok", f"queue {name!r} on {where}")
        _guarded(report, "workers", redactor, lambda: _workers(queue, report))
        _guarded(report, "failed jobs", redactor, lambda: _failed(queue, report, redactor))
    except RedisFailure as exc:
        error = redis_error(exc, redactor, where=f"the queue's {where}")
        report.add("queue", "problem", error.message)
    finally:
        if url:
            connection.close()


def _workers(queue: Any, report: Report) -> None:
    workers, waiting = queue.workers(), queue.count
    running = queue.pending() - waiting
    extractions = sum(_EXTRACTION_ID.search(i) is not None for i in queue.get_job_ids(0, _SEEN))
    backlog = f", {extractions} memory extractions" if extractions else ""
    depth = f"{waiting - extractions} compactions{backlog} queued, {running} running"
    if workers:
        report.add("workers", "ok", f"{workers} live; {depth}")
    elif waiting:
        report.add("workers", "problem", f"no live worker; {depth}: they wait")
    else:
        report.add("workers", "warning", f"no live worker; {depth} (compactions will wait)")


_SEEN = 10_000
"""The queued jobs ``doctor`` reads the ids of, to tell memory extractions from compactions."""
_EXTRACTION_ID = re.compile(r"-x[0-9a-f]+$")
"""How a memory extraction job's id ends (``redis_history.compaction.jobs.extraction_job_id``;
a compaction's ends in hex digits only)."""


def _failed(queue: Any, report: Report, redactor: Redactor) -> None:
    registry = queue.failed_job_registry
    failed = registry.count
    if not failed:
        report.add("failed jobs", "ok", "none")
        return
    newest = registry.get_job_ids(desc=True)[:1]
    job = queue.fetch_job(newest[0]) if newest else None
    result = job.latest_result() if job is not None else None
    text = str(getattr(result, "exc_string", None) or "")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    last = redactor(lines[-1])[:_LAST_ERROR] if lines else "no error recorded"
    report.add("failed jobs", "warning", f"{failed} failed; the last ({job and job.id}): {last}")
