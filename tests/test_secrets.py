"""Secrets stay secret: no password or API key in an error, a log line, a repr, a job's stored
error or the worker's output, also when a server echoes it (plain, escaped or URL-encoded)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import traceback
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from chat_server import ChatServer, Reply
from commands import SECRET, clean_env, run_cli, url
from echoes import escaped_forms
from hypothesis import assume, given
from hypothesis import strategies as st
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from samples import turns
from worker_doubles import InProcessWorker

from redis_history import AsyncRedisHistory, HistoryError, Message, RedisHistory
from redis_history.compaction.jobs import (
    COMPACTION_FUNCTION,
    WorkerSettings,
    compaction_queue,
    configure_worker,
    run_worker,
)
from redis_history.compaction_policy import CompactionPolicy
from redis_history.demo.server import RedisServer, free_port
from redis_history.memory import RedisLongTermMemory
from redis_history.redact import MASK, Redactor, redact_url
from redis_history.store.codec import _unpacked

pytestmark = pytest.mark.real_redis

API_KEY = "sk-worker/key+do-not-leak"
TESTS = Path(__file__).resolve().parent
PAYLOAD = {"namespace": "tenant", "conversation_id": "c", "prefix": "rh", "policy": {}}


@pytest.fixture
def queue_client(guarded: RedisServer) -> Iterator[redis.Redis]:
    """A client of the guarded server, flushed before the test."""
    client = redis.Redis.from_url(url(guarded.port))
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="module")
def echoing() -> Iterator[RedisServer]:
    """A redis-server without AUTH: it echoes the password of a RESP2 client in its error
    (``unknown command 'AUTH', with args beginning with: '<password>'``)."""
    with RedisServer(extra_args=["--rename-command", "AUTH", ""]) as server:
        yield server


def echoed(server: RedisServer) -> str:
    """The URL of a client that sends its password to ``server`` with AUTH."""
    return f"{url(server.port)}?protocol=2"


@pytest.fixture(autouse=True)
def no_worker_settings(signal_handlers: None) -> Iterator[None]:
    """An in-process worker's settings and signal handlers do not outlive its test."""
    yield
    configure_worker(None)


# -- the redaction helper ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://alice:pw@h/0", "redis://alice:***@h/0"),
        ("rediss://alice:p%40w@h/0", "rediss://alice:***@h/0"),
        ("redis://token@h", "redis://***@h"),
        ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=***"),
        ("https://u:pw@llm.example/v1?api_key=k", "https://u:***@llm.example/v1?api_key=***"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_a_url_is_shown_without_its_password(given: str, shown: str) -> None:
    """User-info passwords, bare user-info tokens and password-like parameters are masked."""
    assert redact_url(given) == shown
    assert Redactor()(f"at {given} (refused)") == f"at {shown} (refused)"


@given(secret=st.text(min_size=1, max_size=24), before=st.text(), after=st.text())
def test_a_secret_is_masked_in_every_escaped_form(secret: str, before: str, after: str) -> None:
    """Whatever a secret holds and whatever surrounds it, none of its escaped forms survives."""
    assume("*" not in secret)
    redact = Redactor.of(secret)
    for form in escaped_forms(secret).values():
        shown = redact(f"{before}{form}{after}")
        assert secret not in shown
        assert form not in shown


def refuse(path: str) -> None:
    raise OSError(13, f"denied for {SECRET}", path)


def test_an_exception_and_its_chain_are_redacted_in_place() -> None:
    """The messages of an error, its cause and its context lose the secret, wherever it sits."""
    try:
        try:
            refuse(f"/tmp/{SECRET}")
        except OSError as inner:
            raise ValueError(f"{json.dumps(SECRET)}") from inner
    except ValueError as outer:
        error = outer
    text = Redactor.of(SECRET).exception(error)
    assert MASK in text
    assert SECRET not in "".join(traceback.format_exception(error))


def test_the_worker_settings_show_no_password() -> None:
    """repr and str of the settings mask the store's and the queue's passwords."""
    settings = WorkerSettings(url=url(1), queue_url=f"redis://worker:{SECRET}@q:6379/1")
    for shown in (repr(settings), str(settings)):
        assert SECRET not in shown
        assert "redis://:***@127.0.0.1:1/0" in shown
        assert "redis://worker:***@q:6379/1" in shown


# -- the library's errors ------------------------------------------------------------------------


def shown(error: BaseException) -> str:
    """Everything a traceback of ``error`` prints, with its repr."""
    return "".join(traceback.format_exception(error)) + repr(error)


def test_a_password_the_server_echoes_is_masked_in_a_history_error(echoing: RedisServer) -> None:
    """A server that does not know AUTH or HELLO echoes the password; the sync and asyncio
    histories' errors, and the redis-py errors chained to them, show it masked."""
    history = RedisHistory.from_url(echoed(echoing), "c")
    with pytest.raises(HistoryError) as caught:
        history.append(Message.user("hi"))
    assert "with args beginning with: ***" in str(caught.value)
    assert SECRET not in shown(caught.value)

    async def via_asyncio() -> BaseException:
        client = redis.asyncio.Redis.from_url(echoed(echoing))
        try:
            await AsyncRedisHistory(client, "c").snapshot()
        except HistoryError as exc:
            return exc
        finally:
            await client.aclose()
        raise AssertionError("the server refused nothing")

    assert SECRET not in shown(asyncio.run(via_asyncio()))


def test_a_password_the_server_echoes_is_masked_in_a_memory_error(echoing: RedisServer) -> None:
    """The same for the long-term memory."""
    memory = RedisLongTermMemory(redis.Redis(port=echoing.port, password=SECRET, protocol=2))
    with pytest.raises(HistoryError) as caught:
        memory.store("a fact", {"agent_id": "a"})
    assert SECRET not in shown(caught.value)


# -- the worker --------------------------------------------------------------------------------


def worker_env(**variables: str) -> dict[str, str]:
    """The environment of a worker process: nothing inherited from REDIS_HISTORY_* or RQ_*."""
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    return clean_env(REDIS_HISTORY_TOKEN_COUNTER="heuristic", PYTHONPATH=path, **variables)


def test_the_worker_command_shows_no_password_of_an_unreachable_queue() -> None:
    """`redis-history worker` whose queue (and store) cannot be reached says so without the
    URL's password."""
    result = run_cli("worker", "--burst", env=worker_env(REDIS_HISTORY_URL=url(free_port())))
    assert result.returncode != 0
    assert "redis://:***@127.0.0.1:" in result.stderr
    assert SECRET not in result.stdout + result.stderr


def values_of(client: Any, key: bytes | str) -> list[Any]:
    """The values the key holds, whatever its type (a stream's field values)."""
    kind = client.type(key)
    if kind == b"string":
        return [client.get(key)]
    if kind == b"hash":
        return list(client.hgetall(key).values())
    if kind == b"list":
        return list(client.lrange(key, 0, -1))
    if kind == b"set":
        return list(client.smembers(key))
    if kind == b"zset":
        return list(client.zrange(key, 0, -1))
    return [value for _, entry in client.xrange(key) for value in entry.values()]


def stored_values(client: redis.Redis) -> Iterator[bytes]:
    """Every value in ``client``'s Redis, and each one zlib can decompress decompressed too
    (RQ compresses a job's exc_info), and a compressed envelope's text."""
    for key in client.keys("*"):
        for value in values_of(client, key):
            yield value
            with contextlib.suppress(zlib.error):
                yield zlib.decompress(value)
            if value.endswith(b"\0"):
                with contextlib.suppress(ValueError):
                    yield _unpacked(value)[1].encode()


def failed_job_error(client: redis.Redis, job_id: str) -> str:
    """The traceback RQ stored for a failed job."""
    job = Job.fetch(job_id, connection=client, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FAILED
    result = job.latest_result()
    assert result is not None
    return str(result.exc_string)


STORES = ["closed-port", "cluster-closed-port", "echoes-the-password"]


def store_settings(kind: str, echoing: RedisServer) -> dict[str, str]:
    """The store of ``kind``, with ``SECRET`` in its URL."""
    if kind == "echoes-the-password":
        return {"REDIS_HISTORY_URL": echoed(echoing)}
    store = {"REDIS_HISTORY_URL": url(free_port())}
    if kind == "cluster-closed-port":
        store["REDIS_HISTORY_CLUSTER"] = "1"
    return store


@pytest.mark.parametrize("store", STORES)
def test_a_job_that_meets_the_store_leaks_no_password(
    store: str, guarded: RedisServer, queue_client: redis.Redis, echoing: RedisServer
) -> None:
    """A real worker whose store is unreachable (or echoes the password) fails the job; the
    password is in neither its output nor anything RQ stored in the queue's Redis."""
    queue = compaction_queue(queue_client, "redis-history")
    job = queue.enqueue_call(COMPACTION_FUNCTION, kwargs=PAYLOAD)
    env = worker_env(REDIS_HISTORY_QUEUE_URL=url(guarded.port), **store_settings(store, echoing))
    result = run_cli("worker", "--burst", env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    error = failed_job_error(queue_client, job.id)
    assert "HistoryError" in error or "StoreUnavailableError" in error, error
    assert SECRET not in output
    for value in stored_values(queue_client):
        assert SECRET.encode() not in value


def test_an_in_process_worker_logs_no_secret(  # noqa: PLR0917  (fixtures)
    guarded: RedisServer,
    queue_client: redis.Redis,
    echoing: RedisServer,
    real_redis: redis.Redis,
    redis_url: str,
    chat_server: ChatServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs that fail on a store echoing its password and on a summarizer echoing its key
    (URL-encoded) leave neither in any log record of the worker's process."""
    chat_server.default = Reply(
        401, {"error": f"bad key {urllib.parse.quote(API_KEY, safe='')}"}, reason="Unauthorized"
    )
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("REDIS_HISTORY_SUMMARIZER_BASE_URL", chat_server.url)
    monkeypatch.setenv("REDIS_HISTORY_SUMMARIZER_MAX_RETRIES", "0")
    history = RedisHistory(real_redis, "c", namespace="tenant", token_counter="heuristic")
    history.append_many(turns(6))
    queue = compaction_queue(queue_client, "redis-history")
    policy = CompactionPolicy(soft_tokens=50, hard_tokens=10_000, keep_last_turns=1)
    caplog.set_level(logging.DEBUG)
    for store in (echoed(echoing), redis_url):
        job = queue.enqueue_call(
            COMPACTION_FUNCTION, kwargs={**PAYLOAD, "policy": policy.model_dump(mode="json")}
        )
        settings = WorkerSettings(
            url=store, queue_url=url(guarded.port), summarizer="openai", token_counter="heuristic"
        )
        run_worker(settings, burst=True, worker_class=InProcessWorker)
        error = failed_job_error(queue_client, job.id)
        assert SECRET not in error
        assert API_KEY not in error
        assert urllib.parse.quote(API_KEY, safe="") not in error
    assert "SummarizerError" in error, error
    logged = "\n".join(logging.Formatter().format(record) for record in caplog.records)
    assert "compaction job=" in logged
    for secret in (SECRET, API_KEY, urllib.parse.quote(API_KEY, safe="")):
        assert secret not in logged
