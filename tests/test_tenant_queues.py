"""Tenants' compaction queues, under the printed ACL rule on real Redis, with a real worker.

A tenant enqueues only on its own queue (``<queue>:<namespace>``) and writes only its own
jobs (``rq:job:rhc-<tag>-<32 digits>``): it can neither read, remove nor add to another
tenant's queue or the shared one, nor see which queues exist. A worker serving the tenants'
queues (``REDIS_HISTORY_TENANTS``) runs a job from a tenant's queue only for that tenant's
conversations, whatever the job's hash claims, under the deployment's policy
(``REDIS_HISTORY_TENANT_POLICY``): a job may keep more than it, never less, and never drops
archived originals the deployment keeps.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from commands import clean_env, cli, run_cli
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from worker_processes import Workers

from redis_history import (
    CompactionPolicy,
    JobRefusedError,
    Message,
    RedisHistory,
    ToolCall,
)
from redis_history.compaction.jobs import COMPACTION_FUNCTION, compaction_queue
from redis_history.demo.server import RedisServer
from redis_history.memory import MemoryFilters, RedisLongTermMemory
from redis_history.store.keys import job_id_prefix

pytestmark = pytest.mark.real_redis

PASSWORD = "tenant a's pw"
DEPLOYMENT = CompactionPolicy(keep_last_turns=2, min_messages=2, soft_tokens=50)
"""What the deployment lets a tenant's job keep at least: two turns, and every original."""
GREEDY = CompactionPolicy(
    soft_tokens=50, keep_last_turns=0, min_messages=2, archive_max_messages=1, cooldown_turns=0
)
"""What a tenant would ask for: every turn summarized, one archived original kept."""


@pytest.fixture
def admin(real_redis: redis.Redis, redis_server: RedisServer) -> Iterator[redis.Redis]:
    """The default user, the store's scripts loaded and the tenant's rule applied."""
    loaded = cli("load-scripts", "--redis-url", redis_server.url)
    assert loaded.returncode == 0, loaded.stderr
    printed = cli("acl", "tenant-a", "--user", "tenant-a", "--password", PASSWORD)
    assert printed.returncode == 0, printed.stderr
    real_redis.execute_command(*shlex.split(printed.stdout))  # type: ignore[no-untyped-call]
    yield real_redis
    real_redis.acl_deluser("tenant-a")


@pytest.fixture
def tenant(admin: redis.Redis, redis_server: RedisServer) -> Iterator[redis.Redis]:
    """tenant-a's client: its pods' store and queue."""
    client = redis_server.client(username="tenant-a", password=PASSWORD)
    yield client
    client.close()


@pytest.fixture
def tenant_workers(admin: redis.Redis, redis_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Workers (the operator's user) serving the shared queue and both tenants' queues."""
    env = {
        "REDIS_HISTORY_SUMMARIZER": "extractive",
        "REDIS_HISTORY_TENANTS": "tenant-a,tenant-b",
        "REDIS_HISTORY_TENANT_POLICY": DEPLOYMENT.model_dump_json(),
    }
    launcher = Workers(admin, redis_url, tmp_path, env)
    yield launcher
    launcher.stop_all()


def seeded(history: RedisHistory, turns: int = 5) -> None:
    """A system message and ``turns`` whole turns, each with a tool call and its result."""
    history.append(Message.system("You are a travel agent."))
    for turn in range(turns):
        call = ToolCall(id=f"t{turn}", name="weather", arguments={"city": turn})
        history.append_many(
            [
                Message.user(f"Weather in city {turn}?"),
                Message.assistant("", tool_calls=[call]),
                Message.tool(f"sunny, {20 + turn} degrees", tool_call_id=call.id),
                Message.assistant(f"Sunny in city {turn}."),
            ]
        )


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def ids(client: redis.Redis, queue: str) -> list[str]:
    """The job ids on ``queue``."""
    return [text(job_id) for job_id in client.lrange(f"rq:queue:{queue}", 0, -1)]


def dumps(client: redis.Redis, pattern: str) -> dict[str, Any]:
    return {text(key): client.dump(key) for key in client.keys(pattern)}


def burst(workers: Workers) -> str:
    """Run one worker until the queues are empty; its log."""
    process = workers.start("unused", burst=True)
    assert process.wait(timeout=120) == 0, workers.log(process)
    return workers.log(process)


def test_a_tenant_writes_only_its_own_queue_and_jobs(
    tenant: redis.Redis, admin: redis.Redis
) -> None:
    """Through its own queue a tenant's pod enqueues its compactions; the shared queue,
    another tenant's queue and jobs, the set of queue names and a job's dependents are
    NOPERM; its queue refuses another namespace's request before sending anything."""
    mine = RedisHistory(tenant, "c", namespace="tenant-a")
    seeded(mine)
    queue = compaction_queue(tenant, namespace="tenant-a")
    assert queue.name == "redis-history:tenant-a"
    assert mine.maybe_compact(queue, GREEDY)
    [job_id] = ids(admin, "redis-history:tenant-a")
    assert job_id.startswith(job_id_prefix("tenant-a"))
    theirs = RedisHistory(admin, "c", namespace="tenant-b")
    seeded(theirs)
    other = theirs.core.compaction_request(GREEDY)
    with pytest.raises(JobRefusedError, match="tenant-b"):
        queue(other)
    shared = compaction_queue(admin)
    shared(theirs.core.compaction_request(GREEDY))
    [their_job] = ids(admin, "redis-history")
    refused: list[Callable[[], Any]] = [
        lambda: compaction_queue(tenant)(other),
        lambda: tenant.rpush("rq:queue:redis-history", "x"),
        lambda: tenant.rpush("rq:queue:redis-history:tenant-b", "x"),
        lambda: tenant.lrange("rq:queue:redis-history", 0, -1),
        lambda: tenant.lpop("rq:queue:redis-history"),
        lambda: tenant.hgetall(f"rq:job:{their_job}"),
        lambda: tenant.delete(f"rq:job:{their_job}"),
        lambda: tenant.smembers("rq:queues"),
        lambda: tenant.sadd(f"rq:job:{job_id}:dependents", their_job),
    ]
    for attempt in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert ids(admin, "redis-history") == [their_job]


def test_a_forged_job_for_another_tenant_is_refused_and_changes_nothing(
    tenant: redis.Redis, admin: redis.Redis, tenant_workers: Workers
) -> None:
    """tenant-a writes a job by hand on its own queue naming tenant-b's conversation with a
    policy that would drop b's archived originals, its hash claiming the shared queue as its
    origin: the worker fails it (JobRefusedError) and tenant-b's keys are as they were."""
    theirs = RedisHistory(admin, "c", namespace="tenant-b")
    seeded(theirs)
    before = dumps(admin, "rh:tenant-b:*")
    forged = Job.create(
        COMPACTION_FUNCTION,
        kwargs={
            "namespace": "tenant-b",
            "conversation_id": "c",
            "prefix": "rh",
            "policy": GREEDY.model_dump(mode="json"),
        },
        connection=tenant,
        id=f"{job_id_prefix('tenant-a')}{'f' * 32}",
        status=JobStatus.QUEUED,
        serializer=JSONSerializer,
    )
    forged.origin = "redis-history"
    with tenant.pipeline() as pipe:
        forged.save(pipeline=pipe)
        pipe.rpush("rq:queue:redis-history:tenant-a", forged.id)
        pipe.execute()
    log = burst(tenant_workers)
    job = Job.fetch(forged.id, connection=admin, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FAILED, log
    assert "JobRefusedError" in str(job.latest_result().exc_string)  # type: ignore[union-attr]
    assert dumps(admin, "rh:tenant-b:*") == before


def test_a_tenants_job_runs_under_the_deployments_policy(
    tenant: redis.Redis, admin: redis.Redis, tenant_workers: Workers
) -> None:
    """A tenant's pod asks, through its own queue, for a compaction that keeps no turn and one
    archived original; the worker keeps the deployment's two turns and every original."""
    history = RedisHistory(tenant, "c", namespace="tenant-a")
    seeded(history)
    transcript = history.transcript()
    assert history.maybe_compact(compaction_queue(tenant, namespace="tenant-a"), GREEDY)
    log = burst(tenant_workers)
    assert history.compaction_stats().compactions == 1, log
    live = history.snapshot()
    assert [m.content for m in live[-8:]] == [m.content for m in transcript[-8:]]
    assert sum(m.role == "user" for m in live) == 2
    assert history.transcript() == transcript  # every original archived, none dropped
    assert admin.hget(history.keys.meta, "adropped") in (None, b"0")


def test_the_workers_settings_name_the_tenants_queues(tmp_path: Path) -> None:
    """``REDIS_HISTORY_TENANTS`` adds each tenant's queue to those a worker serves, in the
    order given; a namespace the store would refuse, or a policy that is not one, stops the
    worker before it starts (exit 2, naming the variable)."""
    from redis_history.settings import WorkerSettings  # noqa: PLC0415

    settings = WorkerSettings.from_env({"REDIS_HISTORY_TENANTS": "b, a,b"})
    assert settings.queues == ("redis-history", "redis-history:b", "redis-history:a")
    assert settings.tenant_of("redis-history:a") == "a"
    assert settings.tenant_of("redis-history") is None
    for variable, value in (
        ("REDIS_HISTORY_TENANTS", "a b"),
        ("REDIS_HISTORY_TENANT_POLICY", json.dumps({"keep_last_turns": -1})),
        ("REDIS_HISTORY_TENANT_POLICY", "not json"),
    ):
        result = run_cli("worker", "--burst", env=clean_env(**{variable: value}))
        assert result.returncode == 2, result.stderr
        assert variable in result.stderr


def test_a_job_on_its_tenants_queue_is_admitted_on_the_workers_terms() -> None:
    """A tenant wrote its job's hash: the worker takes its origin from the queue it came from,
    and its time limit, TTLs, retries, repeats and rate limit from the deployment."""
    from redis_history.compaction.jobs import _admit  # noqa: PLC0415
    from redis_history.settings import WorkerSettings  # noqa: PLC0415

    settings = WorkerSettings(tenants=("tenant-a",), tenant_policy=DEPLOYMENT)
    job = Job.create(COMPACTION_FUNCTION, connection=redis.Redis(), timeout=10**6)
    job.origin, job.retries_left, job.repeats_left, job.ttl = "redis-history", 10**6, 10**6, 1
    queue = compaction_queue(redis.Redis(), namespace="tenant-a")
    _admit(job, queue, settings)
    assert job.origin == "redis-history:tenant-a"
    assert job.timeout == DEPLOYMENT.job_timeout_seconds
    assert job.retries_left is None
    assert job.repeats_left is None
    assert job.ttl is None


def test_a_tenant_enqueues_its_memory_extractions_and_the_workers_run_them(
    tenant: redis.Redis, tenant_workers: Workers
) -> None:
    """Under its ACL rule a tenant's pod enqueues an extraction on its own queue (its job id
    fits the rule's job key pattern); the workers extract it into the tenant's memories."""
    history = RedisHistory(tenant, "conv-x", namespace="tenant-a")
    history.append_many([Message.user("I live in Porto."), Message.assistant("Noted.")])
    job = compaction_queue(tenant, namespace="tenant-a").extract(history, "assistant", "u")
    assert job.id.startswith(job_id_prefix("tenant-a"))
    log = burst(tenant_workers)
    assert "status=extracted messages=2 facts=1" in log, log
    memory = RedisLongTermMemory(tenant, namespace="tenant-a")
    assert [r.text for r in memory.list(MemoryFilters("assistant", "u"))] == ["Lives in Porto."]
