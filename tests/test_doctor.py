"""``redis-history doctor`` on real servers: a healthy store, an evicting policy, AOF, a
cluster's slots, the queue's Redis, its workers, its depth and its failed jobs (their last
error redacted), the scripts; exit 0 healthy, 1 a problem, 4 unreachable, 5 refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from commands import SECRET, cli, url
from rq.serializers import JSONSerializer
from rq.worker import Worker
from samples import turns
from worker_doubles import InProcessWorker

from redis_history import CompactionPolicy, RedisHistory
from redis_history.admin.doctor import Report, diagnose, doctor
from redis_history.admin.target import Target
from redis_history.compaction.jobs import (
    COMPACTION_FUNCTION,
    WorkerSettings,
    compaction_queue,
    configure_worker,
    run_worker,
)
from redis_history.demo.server import LocalCluster, RedisServer, free_port
from redis_history.wire.scripts import library

pytestmark = [pytest.mark.real_redis, pytest.mark.usefixtures("signal_handlers")]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, whose settings it may change."""
    with RedisServer() as running:
        yield running


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """A client of that server."""
    client = server.client()
    yield client
    client.close()


def statuses(report: Report) -> dict[str, str]:
    """Each check's status, by name."""
    return {check.name: check.status for check in report.checks}


def detail(report: Report, name: str) -> str:
    return next(check.detail for check in report.checks if check.name == name)


def test_a_fresh_store_is_healthy_with_warnings(server: RedisServer) -> None:
    """noeviction, a recent Redis, the scripts loading: healthy; AOF off and no worker yet are
    warnings, not problems; the command exits 0."""
    report = doctor(server.url)
    assert report.healthy
    assert statuses(report) == {
        "connection": "ok",
        "server": "ok",
        "maxmemory-policy": "ok",
        "persistence": "warning",
        "scripts": "ok",
        "functions": "warning",
        "queue": "ok",
        "workers": "warning",
        "failed jobs": "ok",
    }
    assert detail(report, "server").startswith("Redis 7.")
    assert "load-scripts" in detail(report, "functions")
    result = cli("doctor", "--redis-url", server.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "healthy, 3 warnings"


def test_the_functions_tenants_run_are_reported_loaded(
    server: RedisServer, admin: redis.Redis
) -> None:
    """Once `load-scripts` ran, the store's functions (which a tenant's rule lets its calls
    run, and not load) are reported loaded; flushed, they are a warning again."""
    try:
        loaded = cli("load-scripts", "--redis-url", server.url)
        assert loaded.returncode == 0, loaded.stderr
        assert library().name in loaded.stdout
        assert statuses(doctor(server.url))["functions"] == "ok"
    finally:
        admin.function_flush()
    assert statuses(doctor(server.url))["functions"] == "warning"


def test_an_evicting_policy_is_a_problem_and_aof_is_checked(
    server: RedisServer, admin: redis.Redis
) -> None:
    """Any maxmemory-policy but noeviction is a problem (exit 1), however little it evicts;
    with AOF on, persistence is ok."""
    admin.config_set("maxmemory-policy", "volatile-lru")
    admin.config_set("appendonly", "yes")
    report = doctor(server.url)
    assert not report.healthy
    assert statuses(report)["maxmemory-policy"] == "problem"
    assert "volatile-lru evicts keys" in detail(report, "maxmemory-policy")
    assert statuses(report)["persistence"] == "ok"
    result = cli("doctor", "--redis-url", server.url, "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["healthy"] is False
    assert {"name": "persistence", "status": "ok", "detail": "AOF on"} in data["checks"]


def test_an_unreachable_store_exits_4_and_refused_credentials_5(guarded: RedisServer) -> None:
    """A closed port is exit 4, a wrong password exit 5, each with its report and no secret."""
    closed = cli("doctor", "--redis-url", url(free_port()), "--json")
    assert closed.returncode == 4, closed.stderr
    (check,) = json.loads(closed.stdout)["checks"]
    assert check["name"] == "connection"
    assert "unavailable" in check["detail"]
    refused = cli("doctor", "--redis-url", url(guarded.port, "wrong-pw"))
    assert refused.returncode == 5, refused.stderr
    assert "denied access" in refused.stdout
    for result in (closed, refused):
        assert SECRET not in result.stdout + result.stderr
        assert "Traceback" not in result.stderr


def test_a_script_the_acl_forbids_is_a_problem(server: RedisServer, admin: redis.Redis) -> None:
    """Credentials that may not load scripts cannot run the store: the scripts check says so."""
    admin.acl_setuser(
        "noscripts", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-script"]
    )
    report = doctor(f"redis://noscripts:pw@127.0.0.1:{server.port}/0")
    assert statuses(report)["scripts"] == "problem"
    assert "denied access" in detail(report, "scripts")
    assert report.error is None, "the store answered: not an outage"


def test_workers_and_queue_depth(server: RedisServer, admin: redis.Redis) -> None:
    """Jobs queued with no live worker are a problem; a live worker on the queue is ok and
    counted."""
    client = admin
    queue = compaction_queue(client, "redis-history")
    RedisHistory(client, "c").append_many(turns(6))
    assert RedisHistory(client, "c").maybe_compact(queue, CompactionPolicy(soft_tokens=10))
    report = doctor(server.url)
    assert statuses(report)["workers"] == "problem"
    assert detail(report, "workers") == "no live worker; 1 compactions queued, 0 running: they wait"
    worker = Worker([queue], connection=client, serializer=JSONSerializer)
    worker.register_birth()  # type: ignore[no-untyped-call]
    try:
        report = doctor(server.url)
        assert statuses(report)["workers"] == "ok"
        assert detail(report, "workers").startswith("1 live; 1 compactions queued")
        queue.extract(RedisHistory(client, "c"), "assistant", "u")  # the extraction backlog
        report = doctor(server.url)
        assert detail(report, "workers") == (
            "1 live; 1 compactions, 1 memory extractions queued, 0 running"
        )
    finally:
        worker.register_death()  # type: ignore[no-untyped-call]


@pytest.fixture
def no_worker_settings() -> Iterator[None]:
    """An in-process worker's settings do not outlive its test."""
    yield
    configure_worker(None)


def test_failed_jobs_show_their_last_error_redacted(
    server: RedisServer, admin: redis.Redis, no_worker_settings: None
) -> None:
    """A job that failed is a warning naming how many failed and the last error, with the
    store's password masked."""
    client = admin
    queue = compaction_queue(client, "redis-history")
    payload = {"namespace": "default", "conversation_id": "c", "prefix": "rh"}
    policy = CompactionPolicy(soft_tokens=10).model_dump(mode="json")
    job = queue.enqueue_call(COMPACTION_FUNCTION, kwargs={**payload, "policy": policy})
    unreachable = url(free_port())  # the worker's store: a closed port, behind a password
    settings = WorkerSettings(url=unreachable, queue_url=server.url, token_counter="heuristic")
    run_worker(settings, burst=True, worker_class=InProcessWorker)
    report = doctor(server.url)
    assert statuses(report)["failed jobs"] == "warning"
    text = detail(report, "failed jobs")
    assert text.startswith(f"1 failed; the last ({job.id}): ")
    assert "StoreUnavailableError" in text
    assert SECRET not in text


def test_a_cluster_needs_its_slots_and_a_standalone_queue(
    redis_cluster: LocalCluster, cluster_client: object, redis_url: str
) -> None:
    """On a cluster every primary is checked and the slots must be covered; without a queue
    URL the queue is a problem (RQ needs a standalone Redis), with one it is checked there."""
    report = doctor(redis_cluster.url, cluster=True)
    assert statuses(report)["cluster"] == "ok"
    assert detail(report, "cluster") == "state ok, 16384 of 16384 slots assigned, 0 failing"
    assert detail(report, "connection") == "connected and authenticated (3 primaries)"
    assert statuses(report)["queue"] == "problem"
    assert "RQ needs a standalone Redis" in detail(report, "queue")
    report = doctor(redis_cluster.url, cluster=True, queue_url=redis_url)
    assert report.healthy, report.checks
    result = cli("doctor", "--redis-url", redis_cluster.url, "--cluster", "--queue-url", redis_url)
    assert result.returncode == 0, result.stdout + result.stderr


def test_diagnose_works_on_a_client_given_from_python(real_redis: redis.Redis) -> None:
    """diagnose takes a Target made on an existing client; the queue is then on that client."""
    report = diagnose(Target(real_redis))
    assert report.healthy
    assert detail(report, "queue") == "queue 'redis-history' on the store"
