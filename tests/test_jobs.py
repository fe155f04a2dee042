"""The RQ compaction job: settings, claim release, failures, and the worker's allowlist."""

from __future__ import annotations

import asyncio
import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import rq
from chat_server import ChatServer, Reply, completion
from commands import clean_env, run_cli
from rq import Callback, Queue, SimpleWorker
from rq.job import Job, JobStatus
from rq.serializers import DefaultSerializer, JSONSerializer
from rq.timeouts import TimerDeathPenalty
from rq.worker import Worker
from samples import turns
from summarizers_for_tests import TAG
from worker_doubles import InProcessWorker

from redis_history import AsyncRedisHistory, Message, RedisHistory, settings
from redis_history.cli import main
from redis_history.compaction import jobs
from redis_history.compaction.jobs import (
    COMPACTION_FUNCTION,
    CompactionOnlyJob,
    CompactionQueue,
    CompactionWorker,
    SimpleCompactionWorker,
    WorkerSettings,
    compact_conversation,
    compaction_queue,
    configure_worker,
    run_worker,
)
from redis_history.compaction_policy import CompactionPolicy
from redis_history.demo.server import LocalCluster, free_port
from redis_history.tokens import message_tokens, resolve_counter
from redis_history.wire import scripts

POLICY = CompactionPolicy(
    soft_tokens=50, hard_tokens=10_000, keep_last_turns=1, min_messages=2, cooldown_turns=0
)
TAGGING = "summarizers_for_tests:Tagging"
FAILING = "summarizers_for_tests:Failing"
CALLBACK_KEY = "test-jobs:callback-ran"

pytestmark = pytest.mark.usefixtures("signal_handlers")


def create_marker(path: str) -> None:
    """What a forged job would run: creates a file."""
    Path(path).write_text("ran")


def mark_callback(job: Job, connection: Any, *exc_info: Any) -> None:
    """A failure callback a forged job might name: leaves a key behind."""
    connection.set(CALLBACK_KEY, job.id)


@pytest.fixture
def server() -> fakeredis.FakeServer:
    """The (fake) Redis server holding the histories."""
    return fakeredis.FakeServer()


@pytest.fixture
def store(server: fakeredis.FakeServer) -> fakeredis.FakeRedis:
    """The history store the worker writes to."""
    return fakeredis.FakeRedis(server=server)


@pytest.fixture
def queue() -> CompactionQueue:
    """A JSON queue on its own (fake) Redis, as in a deployment with a separate queue."""
    return compaction_queue(fakeredis.FakeRedis(server=fakeredis.FakeServer()), "compaction")


@pytest.fixture(autouse=True)
def worker_settings(store: fakeredis.FakeRedis) -> Iterator[WorkerSettings]:
    """Jobs in this process use the fake store and the tagging summarizer."""
    settings = WorkerSettings(summarizer=TAGGING, token_counter="heuristic")
    configure_worker(settings, store=store)
    yield settings
    configure_worker(None)


class PlainWorker(SimpleWorker):
    """RQ's own in-process worker, no allowlist, timed the same way."""

    death_penalty_class = TimerDeathPenalty


def work(queue: CompactionQueue) -> None:
    """Run every queued job in this process through the allowlisting worker."""
    InProcessWorker([queue], connection=queue.connection).work(burst=True)


def failure(queue: CompactionQueue, job_id: str) -> str:
    """The traceback of a job that must have failed."""
    job = Job.fetch(job_id, connection=queue.connection, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FAILED
    result = job.latest_result()
    assert result is not None
    return str(result.exc_string)


def conversation(store: fakeredis.FakeRedis, n: int = 6) -> RedisHistory:
    """A conversation long enough to compact."""
    history = RedisHistory(store, "user:1", namespace="tenant", token_counter="heuristic")
    history.append_many(turns(n))
    return history


def claimed(history: RedisHistory) -> bool:
    """Whether a compaction is pending for the conversation."""
    return bool(history.client.hexists(history.keys.meta, "queued"))


def test_settings_come_from_the_environment_with_defaults() -> None:
    """from_env reads every REDIS_HISTORY_* variable and fills in the defaults."""
    assert WorkerSettings.from_env({}) == WorkerSettings()
    assert WorkerSettings().queue_redis_url == jobs.DEFAULT_URL
    settings = WorkerSettings.from_env(
        {
            "REDIS_HISTORY_URL": "redis://store:7000/0",
            "REDIS_HISTORY_CLUSTER": "yes",
            "REDIS_HISTORY_QUEUE_URL": "redis://queue:6379/1",
            "REDIS_HISTORY_QUEUE": "q",
            "REDIS_HISTORY_SUMMARIZER": "openai",
            "REDIS_HISTORY_TOKEN_COUNTER": "heuristic",
        }
    )
    assert settings == WorkerSettings(
        url="redis://store:7000/0",
        cluster=True,
        queue_url="redis://queue:6379/1",
        queue="q",
        summarizer="openai",
        token_counter="heuristic",
    )
    assert settings.queue_redis_url == "redis://queue:6379/1"


def test_a_cluster_store_needs_its_own_queue_and_flags_must_be_clear() -> None:
    """A cluster without a queue URL, or an unreadable flag, is a clear ValueError."""
    with pytest.raises(ValueError, match="REDIS_HISTORY_QUEUE_URL is required"):
        WorkerSettings.from_env({"REDIS_HISTORY_CLUSTER": "1"})
    with pytest.raises(ValueError, match="REDIS_HISTORY_CLUSTER"):
        WorkerSettings.from_env({"REDIS_HISTORY_CLUSTER": "maybe"})


def test_the_queue_uses_json_and_the_configured_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """compaction_queue is a JSONSerializer queue named by the argument or REDIS_HISTORY_QUEUE."""
    monkeypatch.setenv("REDIS_HISTORY_QUEUE", "from-env")
    connection = fakeredis.FakeRedis()
    assert compaction_queue(connection).name == "from-env"
    named = compaction_queue(connection, "explicit")
    assert named.name == "explicit"
    assert named.serializer is JSONSerializer


def test_a_job_compacts_and_releases_its_claim(
    store: fakeredis.FakeRedis, queue: CompactionQueue
) -> None:
    """maybe_compact enqueues; the worker compacts with its own summarizer and frees the claim."""
    history = conversation(store)
    messages = history.snapshot()
    assert history.maybe_compact(queue, POLICY)
    assert not history.maybe_compact(queue, POLICY), "one pending job per conversation"
    work(queue)
    live = history.snapshot()
    assert live[0].content.startswith(f"be helpful\n\n{TAG} q0 / q1 / q2 / q3 / q4")
    assert live[1:] == messages[21:]
    assert not claimed(history)
    assert not store.exists(history.keys.lock)
    assert queue.failed_job_registry.count == 0
    history.advance_turn()
    history.append_many(turns(4)[1:])
    assert history.maybe_compact(queue, POLICY), "the released claim lets the next one enqueue"


def test_a_worker_compacts_a_conversation_a_lenient_pod_wrote(
    store: fakeredis.FakeRedis, queue: CompactionQueue
) -> None:
    """Questions sent in two user messages and answered in two: the worker's history (strict
    by default) cuts before a question, never between its halves, and writes back."""
    history = RedisHistory(store, "user:2", namespace="tenant", roles="lenient")
    history.append(Message.system("be helpful"))
    for n in range(8):
        history.append_many([Message.user(f"q{n}"), Message.user(f"q{n} again")])
        history.append_many([Message.assistant("a" * 40), Message.assistant("b" * 40)])
    messages = history.snapshot()
    assert history.maybe_compact(queue, POLICY)
    work(queue)
    assert queue.failed_job_registry.count == 0
    summary, *kept = history.snapshot()
    assert summary.content.startswith(f"be helpful\n\n{TAG} q0 / q0 again / q1")
    assert kept == messages[-len(kept) :]
    assert [m.content for m in kept[:2]] == ["q7", "q7 again"]  # the last exchange, whole
    assert history.turns()[0].lead == (summary,)


def test_by_default_a_worker_prices_its_summary_exactly_while_pods_estimate(
    store: fakeredis.FakeRedis, queue: CompactionQueue
) -> None:
    """Without a configured counter the worker counts with exact o200k (off the hot path),
    whatever the pods use: the summary's envelope says exact, the pods' estimates do not."""
    configure_worker(WorkerSettings(summarizer=TAGGING), store=store)
    history = RedisHistory(store, "user:1", namespace="tenant")  # the default: an estimate
    history.append_many(turns(6))
    assert history.maybe_compact(queue, POLICY)
    work(queue)
    summary, *rest = history.entries()
    assert summary.summary
    assert summary.exact
    assert summary.tokens == message_tokens(summary.message, resolve_counter("o200k_base"))
    assert rest
    assert not any(e.exact for e in rest)


def test_a_failing_summarizer_fails_the_job_and_writes_nothing(
    store: fakeredis.FakeRedis, queue: CompactionQueue, worker_settings: WorkerSettings
) -> None:
    """When the summarizer raises, the job fails, nothing changes, and lock and claim are gone."""
    configure_worker(WorkerSettings(summarizer=FAILING, token_counter="heuristic"), store=store)
    history = conversation(store)
    before = history.entries()
    assert history.maybe_compact(queue, POLICY)
    (job_id,) = queue.job_ids
    work(queue)
    assert "SummarizerError" in failure(queue, job_id)
    assert history.entries() == before
    assert history.transcript() == [e.message for e in before]
    assert not store.exists(history.keys.lock)
    assert not claimed(history)
    assert history.maybe_compact(queue, POLICY)


@pytest.mark.parametrize(
    ("reply", "error", "requests"),
    [
        pytest.param(Reply(status=500), "HTTP 500", 2, id="http-500"),
        pytest.param(Reply(delay=2.0), "timed out", 2, id="timeout"),
        pytest.param(Reply(body=b"<html>oops</html>"), "is not JSON", 1, id="malformed"),
    ],
)
def test_an_llm_endpoint_failure_fails_the_job_and_writes_nothing(  # noqa: PLR0917  (fixtures)
    store: fakeredis.FakeRedis,
    queue: CompactionQueue,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
    reply: Reply,
    error: str,
    requests: int,
) -> None:
    """With the OpenAI-compatible summarizer on a real HTTP server that fails, the job fails,
    nothing is written, and the lock and the claim are released."""
    monkeypatch.setenv("REDIS_HISTORY_SUMMARIZER_BASE_URL", chat_server.url)
    monkeypatch.setenv("REDIS_HISTORY_SUMMARIZER_TIMEOUT", "0.2")
    monkeypatch.setenv("REDIS_HISTORY_SUMMARIZER_MAX_RETRIES", "1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chat_server.default = reply
    configure_worker(WorkerSettings(summarizer="openai", token_counter="heuristic"), store=store)
    history = conversation(store)
    before = history.entries()
    assert history.maybe_compact(queue, POLICY)
    (job_id,) = queue.job_ids
    work(queue)
    traceback = failure(queue, job_id)
    assert "SummarizerError" in traceback
    assert error in traceback
    assert len(chat_server.requests) == requests, "a malformed reply is not retried"
    assert history.entries() == before
    assert not store.exists(history.keys.lock)
    assert not claimed(history)
    assert history.maybe_compact(queue, POLICY)


def test_an_llm_summary_is_written_back(
    store: fakeredis.FakeRedis,
    queue: CompactionQueue,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's OpenAI-compatible summarizer is sent the prefix; its reply is the summary."""
    monkeypatch.setenv("REDIS_HISTORY_SUMMARIZER_BASE_URL", chat_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chat_server.default = Reply(body=completion("- q0 to q4 were asked and answered."))
    configure_worker(WorkerSettings(summarizer="openai", token_counter="heuristic"), store=store)
    history = conversation(store)
    assert history.maybe_compact(queue, POLICY)
    work(queue)
    (request,) = chat_server.requests
    assert "q4" in request.body["messages"][1]["content"]
    assert "q5" not in request.body["messages"][1]["content"], "the kept turn is not summarized"
    assert history.snapshot()[0].content == (
        "be helpful\n\nPreviously:\n- q0 to q4 were asked and answered."
    )


def test_release_compaction_claim_drops_only_its_own_claim(
    server: fakeredis.FakeServer, store: fakeredis.FakeRedis, queue: CompactionQueue
) -> None:
    """A claim is released by its own job id only, from the sync and the asyncio history alike."""
    history = conversation(store)
    assert history.maybe_compact(queue, POLICY)
    (job_id,) = queue.job_ids
    assert not history.release_compaction_claim("rh-compact-someone-else")
    assert claimed(history)
    assert history.release_compaction_claim(job_id)
    assert not claimed(history)

    async def via_asyncio() -> tuple[bool, bool]:
        client = fakeredis.FakeAsyncRedis(server=server)
        async_history = AsyncRedisHistory(client, "user:1", namespace="tenant")
        try:
            assert await async_history.maybe_compact(queue, POLICY)
            return (
                await async_history.release_compaction_claim("rh-compact-someone-else"),
                await async_history.release_compaction_claim(queue.job_ids[-1]),
            )
        finally:
            await client.aclose()

    assert asyncio.run(via_asyncio()) == (False, True)
    assert not claimed(history)


def test_the_worker_refuses_any_other_function(tmp_path: Path, queue: CompactionQueue) -> None:
    """A job naming another importable function fails without running it."""
    marker = tmp_path / "ran"
    job = queue.enqueue_call("test_jobs.create_marker", kwargs={"path": str(marker)})
    work(queue)
    assert "JobRefusedError" in failure(queue, job.id)
    assert not marker.exists()
    plain = Queue("plain", connection=queue.connection, serializer=JSONSerializer)
    control = plain.enqueue_call("test_jobs.create_marker", kwargs={"path": str(marker)})
    PlainWorker([plain], connection=plain.connection, serializer=JSONSerializer).work(burst=True)
    assert marker.exists(), "a plain RQ worker runs it: the allowlist is what stopped it"
    assert control.get_status() == JobStatus.FINISHED


def test_callbacks_and_webhooks_a_job_names_are_never_used(
    queue: CompactionQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing compaction job's failure callback is not imported and its webhooks are not sent."""
    sent: list[str] = []
    monkeypatch.setattr(rq.webhook.Webhook, "send", lambda hook, *a, **k: sent.append(hook.url))
    job = queue.enqueue_call(
        COMPACTION_FUNCTION,
        kwargs={"namespace": "tenant", "conversation_id": "c", "prefix": "rh", "policy": "bad"},
        on_failure=Callback("test_jobs.mark_callback"),
        webhooks=[rq.Webhook("http://127.0.0.1:9/hook", "failed")],
    )
    work(queue)
    assert "ValidationError" in failure(queue, job.id)
    assert not queue.connection.exists(CALLBACK_KEY)
    assert sent == []


def test_a_bad_conversation_id_fails_the_job_cleanly(
    store: fakeredis.FakeRedis, queue: CompactionQueue
) -> None:
    """A conversation id that cannot be a key fails the job with a ValueError, touching nothing."""
    job = queue.enqueue_call(
        COMPACTION_FUNCTION,
        kwargs={"namespace": "tenant", "conversation_id": "a{b}", "prefix": "rh", "policy": {}},
    )
    work(queue)
    assert "may not contain braces" in failure(queue, job.id)
    assert store.dbsize() == 0


def test_a_bad_policy_fails_the_job_and_releases_its_claim(
    store: fakeredis.FakeRedis, queue: CompactionQueue
) -> None:
    """A policy that does not validate fails the job, writes nothing, and frees the claim."""
    history = conversation(store)
    before = history.entries()
    assert history.maybe_compact(queue, POLICY)
    (job_id,) = queue.job_ids
    job = Job.fetch(job_id, connection=queue.connection, serializer=JSONSerializer)
    job.kwargs = {**job.kwargs, "policy": {**job.kwargs["policy"], "soft_tokens": -1}}
    job.save()
    work(queue)
    assert "soft_tokens" in failure(queue, job_id)
    assert history.entries() == before
    assert not claimed(history)


def test_a_summarizer_in_the_payload_is_rejected(
    store: fakeredis.FakeRedis, queue: CompactionQueue
) -> None:
    """The worker's summarizer comes from its settings: a payload naming one fails the job."""
    history = conversation(store)
    before = history.entries()
    assert history.maybe_compact(queue, POLICY)
    (job_id,) = queue.job_ids
    job = Job.fetch(job_id, connection=queue.connection, serializer=JSONSerializer)
    job.kwargs = {**job.kwargs, "summarizer": FAILING}
    job.save()
    work(queue)
    assert "unexpected keyword argument 'summarizer'" in failure(queue, job_id)
    assert history.entries() == before


def test_the_job_returns_a_small_json_result(store: fakeredis.FakeRedis) -> None:
    """Called directly (no RQ job, so no claim), the job function returns a JSON-able summary."""
    history = conversation(store)
    result = compact_conversation("tenant", "user:1", "rh", POLICY.model_dump(mode="json"))
    assert json.loads(json.dumps(result)) == result
    assert result["status"] == "compacted"
    assert result["dropped"] == 21
    assert result["tokens_freed"] > 0
    assert len(history) == 5


def test_the_workers_refuse_pickle_and_foreign_job_classes() -> None:
    """A compaction worker starts only with JSON and its own job class (RQ's default replaced)."""
    connection = fakeredis.FakeRedis()
    with pytest.raises(ValueError, match="JSONSerializer"):
        CompactionWorker(["q"], connection=connection, serializer=DefaultSerializer)

    class OtherJob(Job):
        pass

    with pytest.raises(TypeError, match="CompactionOnlyJob"):
        SimpleCompactionWorker(["q"], connection=connection, job_class=OtherJob)
    worker = CompactionWorker(
        ["q"], connection=connection, job_class="rq.job.Job", serializer="json"
    )
    assert worker.job_class is CompactionOnlyJob
    assert worker.serializer is JSONSerializer


def test_a_worker_reads_every_script_and_the_driver_metadata_before_it_forks() -> None:
    """A forked horse inherits the Lua scripts and redis-py's driver metadata, read once
    (redis-py before 7.2 has none: it reads its version once, when imported)."""
    scripts.script.cache_clear()
    settings.driver_info.cache_clear()
    CompactionWorker(["q"], connection=fakeredis.FakeRedis())
    assert scripts.script.cache_info().currsize == len(scripts.script_names())
    assert settings.driver_info.cache_info().currsize == 1
    shared = settings.driver_info()
    for client in (WorkerSettings().store_client(), WorkerSettings().queue_client()):
        assert isinstance(client, redis.Redis)
        assert client.connection_pool.connection_kwargs.get("driver_info") is shared


def test_a_work_horse_freezes_what_it_inherited_before_running_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The horse's collector never walks the worker's objects: they are frozen first."""
    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(Worker, "main_work_horse", lambda *_: calls.append("horse"))
    worker = CompactionWorker(["q"], connection=fakeredis.FakeRedis())
    worker.main_work_horse(Job(connection=worker.connection), worker.queues[0])
    assert calls == ["freeze", "horse"]


def test_a_forked_process_builds_its_own_store_client_and_summarizer() -> None:
    """After a fork, jobs get a new client and summarizer, never the parent's."""
    configure_worker(WorkerSettings(url="redis://127.0.0.1:1/0", summarizer=TAGGING))
    parent = jobs._process()
    assert jobs._process() is parent, "reused within a process"
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            child = jobs._process()
            fresh = child.store is not parent.store and child.summarizer is not parent.summarizer
            code = 0 if fresh and child.pid == os.getpid() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.real_redis
def test_the_worker_command_compacts_on_a_real_redis(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """`redis-history worker --burst` in its own process compacts what maybe_compact enqueued."""
    queue = compaction_queue(real_redis, "redis-history")
    histories = [RedisHistory(real_redis, f"conv-{i}") for i in range(2)]
    for history in histories:
        history.append_many(turns(6))
        assert history.maybe_compact(queue, POLICY)
    result = run_cli("worker", "--burst", "--redis-url", redis_url)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.count("compaction job=") == 2, output
    for history in histories:
        assert history.snapshot()[0].metadata.get("summary") is True, output
        assert len(history) == 5
        assert not claimed(history)
    assert queue.failed_job_registry.count == 0


def test_a_bad_summarizer_stops_the_worker_before_any_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`redis-history worker` with an unknown summarizer exits 2 with the reason, taking no job."""
    code = main(["worker", "--burst", "--summarizer", "no-such-summarizer"])
    assert code == 2
    assert "unknown summarizer 'no-such-summarizer'" in capsys.readouterr().err


def test_a_worker_whose_summarizer_cannot_work_refuses_to_start() -> None:
    """`redis-history worker` with the openai summarizer and neither an API key nor a base URL
    exits 2 with one line naming what to set, before it reaches Redis or takes a job."""
    env = clean_env(
        REDIS_HISTORY_SUMMARIZER="openai",
        REDIS_HISTORY_URL=f"redis://127.0.0.1:{free_port()}/0",  # nothing listens: not reached
    )
    env.pop("OPENAI_API_KEY", None)
    for module in ("redis_history", "worker"):
        result = run_cli(*(["worker"] if module == "redis_history" else []), env=env, module=module)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            "redis-history: the openai summarizer has no API key for https://api.openai.com/v1: "
            "set OPENAI_API_KEY, or REDIS_HISTORY_SUMMARIZER_BASE_URL to a server that needs none"
        ]


@pytest.mark.real_redis
def test_a_cluster_store_is_compacted_through_a_standalone_queue(
    redis_cluster: LocalCluster, cluster_client: Any, real_redis: redis.Redis, redis_url: str
) -> None:
    """With REDIS_HISTORY_CLUSTER set, the worker compacts on the cluster; RQ stays standalone."""
    history = RedisHistory(cluster_client, "clustered", namespace="tenant")
    history.append_many(turns(6))
    queue = compaction_queue(real_redis, "redis-history")
    assert history.maybe_compact(queue, POLICY)
    settings = WorkerSettings.from_env(
        {
            "REDIS_HISTORY_URL": redis_cluster.url,
            "REDIS_HISTORY_CLUSTER": "1",
            "REDIS_HISTORY_QUEUE_URL": redis_url,
            "REDIS_HISTORY_SUMMARIZER": TAGGING,
        }
    )
    assert run_worker(settings, burst=True, worker_class=InProcessWorker)
    live = history.snapshot()
    assert live[0].content.startswith(f"be helpful\n\n{TAG}")
    assert len(live) == 5
    assert not claimed(history)


def test_a_cluster_store_that_is_down_fails_the_job_typed_and_the_worker_goes_on(
    queue: CompactionQueue,
) -> None:
    """With every node of the store's cluster unreachable, a job fails with
    StoreUnavailableError (not a raw RedisClusterException) and the worker serves the next."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    configure_worker(WorkerSettings(url=dead, cluster=True, queue_url=dead, summarizer=TAGGING))
    payload = {"namespace": "tenant", "conversation_id": "c", "prefix": "rh", "policy": {}}
    first = queue.enqueue_call(COMPACTION_FUNCTION, kwargs=payload)
    second = queue.enqueue_call(COMPACTION_FUNCTION, kwargs=payload)
    work(queue)
    for job in (first, second):
        assert "StoreUnavailableError" in failure(queue, job.id)
