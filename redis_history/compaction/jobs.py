"""The RQ side of compaction: the queue pods schedule on, the job function, and the workers.

This is the only package module that imports ``rq``. Pods schedule with
:meth:`~redis_history.RedisHistory.maybe_compact` on :func:`compaction_queue`;
workers run :func:`compact_conversation`, configured from their own
environment (the ``REDIS_HISTORY_*`` variables of :mod:`redis_history.settings`,
read by :class:`WorkerSettings`), never from the job payload.

Once started, a worker rides out outages of its queue's Redis (a restart, a
failover, killed connections): it waits with a bounded backoff, logs the outage
once when it starts and once when it ends, and goes on serving. An outage of
the history store fails only the jobs that needed it. A worker that cannot
reach its queue when it starts exits with :class:`StoreUnavailableError`, so a
wrong URL is reported rather than waited on; one the queue refuses (a wrong
password, an ACL) with :class:`AccessDeniedError`, as does a job the store refuses.

A queue that anyone can write lets them enqueue any importable function with
JSON arguments. :class:`CompactionWorker` therefore runs :class:`CompactionOnlyJob`,
which refuses every function but :data:`COMPACTION_FUNCTION` and :data:`EXTRACTION_FUNCTION`
(memory extraction, which the same workers run) before importing it, never imports a
callback a job names, sends no webhooks, and the worker refuses to start with any
serializer but ``JSONSerializer`` (pickle would run code while merely fetching a job).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import pkgutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import redis
import rq
from redis.cluster import RedisCluster
from redis.exceptions import AuthenticationError
from rq.job import Job, JobStatus
from rq.logutils import setup_loghandlers
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer, resolve_serializer
from rq.utils import now
from rq.worker import BaseWorker, DequeueStrategy, SimpleWorker, Worker, WorkerStatus

from redis_history.compaction.compactors import Compactor, resolve_compactor
from redis_history.compaction.run import CompactionResult, run_compaction
from redis_history.compaction.summarizers import Summarizer, resolve_summarizer
from redis_history.compaction_policy import CompactionPolicy
from redis_history.errors import HistoryError, JobRefusedError
from redis_history.memory.embedders import AsyncEmbedder, Embedder, resolve_embedder
from redis_history.memory.extraction import Extractor, MemoryExtraction, resolve_extractor
from redis_history.memory.redis_memory import RedisLongTermMemory
from redis_history.redact import NOTHING, Redactor, client_secrets, redact_url
from redis_history.settings import (
    DEFAULT_QUEUE,
    DEFAULT_URL,
    WorkerSettings,
    driver_info,
    redactor,
)
from redis_history.store.core import CompactionRequest
from redis_history.store.history import RedisHistory
from redis_history.store.keys import (
    DEFAULT_PREFIX,
    JOB_ID_DIGITS,
    MemoryKeys,
    job_id_prefix,
    tenant_queue,
    validate_scope,
)
from redis_history.tokens import DEFAULT_ENCODING, TokenCounter, resolve_counter
from redis_history.wire import RedisFailure, bytes_client, redis_error
from redis_history.wire.scripts import script, script_names

if TYPE_CHECKING:
    from redis.client import Pipeline, PubSub, PubSubWorkerThread
    from rq.executions import Execution

    from redis_history.compaction.metrics import WorkerMetrics

__all__ = [
    "COMPACTION_FUNCTION",
    "DEFAULT_QUEUE",
    "DEFAULT_URL",
    "EXTRACTION_FUNCTION",
    "FAILURE_TTL",
    "RESULT_TTL",
    "CompactionOnlyJob",
    "CompactionQueue",
    "CompactionWorker",
    "JobRefusedError",
    "SimpleCompactionWorker",
    "WorkerSettings",
    "compact_conversation",
    "compaction_queue",
    "configure_worker",
    "extract_memories",
    "run_worker",
]

logger = logging.getLogger(__name__)


COMPACTION_FUNCTION = "redis_history.compaction.jobs.compact_conversation"
"""The function compaction jobs run."""
EXTRACTION_FUNCTION = "redis_history.compaction.jobs.extract_memories"
"""The function memory extraction jobs run (:mod:`redis_history.memory.extraction`)."""
RESULT_TTL = 60
"""Seconds RQ keeps a finished job (its hash, its small JSON result: status, dropped, tokens
freed). The store reads none of it; the worker's metrics read the result as the job ends,
and an operator watching the queue sees it for a minute. Kept an hour, as RQ's default, a
deployment running a thousand compactions a minute paid for 60,000 finished jobs."""
FAILURE_TTL = 24 * 3600
"""Seconds RQ keeps a failed job and its traceback, which ``doctor`` reports."""


class CompactionQueue(rq.Queue):
    """An RQ queue of compaction jobs, JSON only, that schedules what ``maybe_compact`` asks:
    call it with a :class:`~redis_history.store.core.CompactionRequest`.

    A tenant's own queue (``namespace`` given) takes only its namespace's compactions, and
    enqueues with no command beyond its ACL rule's: the job's ``HSET`` and the ``RPUSH`` of
    its id, in one ``MULTI`` (RQ's ``enqueue`` would also read the server's ``INFO`` and add
    the queue to the set of every queue's name, ``rq:queues``, which a tenant may not see).
    """

    def __init__(self, name: str, connection: redis.Redis, *, namespace: str | None = None) -> None:
        super().__init__(name, connection=connection, serializer=JSONSerializer)
        self.namespace = namespace
        """The tenant whose own queue this is; ``None`` for the shared queue."""

    def workers(self) -> int:
        """How many workers listen on this queue."""
        return int(Worker.count(queue=self))

    def pending(self) -> int:
        """Compactions queued or running: 0 once the workers have drained the queue."""
        return int(self.count + StartedJobRegistry(queue=self).count)

    def extract(self, history: RedisHistory, agent_id: str, user_id: str | None = None) -> Job:
        """Enqueue the extraction of ``history``'s messages not extracted yet into the
        memories of (``agent_id``, ``user_id``), in the history's namespace, a job of
        :data:`EXTRACTION_FUNCTION`: the pod's turn does not wait for it.

        Raises:
            JobRefusedError: a tenant's queue handed another namespace's conversation.
            ValueError: an unusable agent or user id.
        """
        MemoryKeys.build(agent_id, user_id, history.namespace, history.options.prefix)
        payload = {
            "namespace": history.namespace,
            "conversation_id": history.conversation_id,
            "prefix": history.options.prefix,
            "agent_id": agent_id,
            "user_id": user_id,
        }
        job_id = extraction_job_id(
            history.namespace, history.conversation_id, agent_id, user_id, history.options.prefix
        )
        return self._enqueue(EXTRACTION_FUNCTION, payload, job_id, history.namespace, 300)

    def _enqueue(
        self, function: str, payload: dict[str, Any], job_id: str, namespace: str, timeout: int
    ) -> Job:
        """Enqueue a job of ``function``: on a tenant's queue, with no command beyond its
        rule's (see the class), and only for its namespace."""
        options: dict[str, Any] = {
            "kwargs": payload,
            "job_id": job_id,
            "timeout": timeout,
            "result_ttl": RESULT_TTL,
            "failure_ttl": FAILURE_TTL,
        }
        if self.namespace is None:
            return self.enqueue_call(function, **options)
        if namespace != self.namespace:
            raise JobRefusedError(
                f"queue {self.name!r} takes jobs of namespace {self.namespace!r} only, "
                f"not of {namespace!r}"
            )
        job = self.create_job(function, **options)
        job.origin, job.enqueued_at = self.name, now()
        with self.connection.pipeline() as pipe:
            job.save(pipeline=pipe)
            self.push_job_id(job.id, pipeline=pipe)
            pipe.execute()
        return job

    def __call__(self, request: CompactionRequest) -> Job:
        """Enqueue ``request`` as a job of ``COMPACTION_FUNCTION`` under the request's id.

        Raises:
            JobRefusedError: a tenant's queue handed another namespace's compaction.
        """
        timeout = request.policy.job_timeout_seconds
        return self._enqueue(
            COMPACTION_FUNCTION, request.payload(), request.job_id, request.namespace, timeout
        )


def extraction_job_id(
    namespace: str, conversation_id: str, agent_id: str, user_id: str | None, prefix: str
) -> str:
    """The id of the extraction job of a conversation into an owner's memories: one per
    conversation and owner, under the namespace's job id prefix and as long as a compaction
    job's (``x`` then 31 hex digits, where a compaction's has 32), which the tenant's ACL
    rule's job key pattern requires."""
    who = "\0".join((conversation_id, agent_id, user_id or ""))
    digest = hashlib.blake2b(who.encode(), digest_size=16).hexdigest()
    return f"{job_id_prefix(namespace, prefix)}x{digest[: JOB_ID_DIGITS - 1]}"


def compaction_queue(
    connection: redis.Redis | None = None,
    name: str | None = None,
    *,
    namespace: str | None = None,
) -> CompactionQueue:
    """The RQ queue pods pass to ``maybe_compact``, using ``JSONSerializer``.

    Args:
        connection: the queue's Redis; from :meth:`WorkerSettings.from_env` when ``None``.
        name: the queue name; ``REDIS_HISTORY_QUEUE`` (or ``redis-history``) when ``None``.
        namespace: a tenant's namespace: its own queue, ``<name>:<namespace>``, which only
            its compactions go to and which its ACL rule lets it write (the workers serve it
            when ``REDIS_HISTORY_TENANTS`` names it).

    Returns:
        The queue.

    Raises:
        TypeError: ``connection`` is a cluster client; RQ needs a standalone Redis.
        UnsupportedClientError: a client made with ``decode_responses=True`` (RQ reads bytes).
        ValueError: an unusable namespace.
    """
    if isinstance(connection, RedisCluster):
        raise TypeError("RQ cannot run on a Redis Cluster: give the queue a standalone Redis")
    if connection is None or name is None:
        settings = WorkerSettings.from_env()
        connection = settings.queue_client() if connection is None else connection
        name = settings.queue if name is None else name
    connection = bytes_client(connection, "the compaction queue")
    if namespace is None:
        return CompactionQueue(name, connection)
    validate_scope(namespace, DEFAULT_PREFIX)
    return CompactionQueue(tenant_queue(name, namespace), connection, namespace=namespace)


# -- the job function -------------------------------------------------------------------------


def _redactor(settings: WorkerSettings | None, secrets: tuple[str, ...] = ()) -> Redactor:
    """Masks what a worker knows to be secret: the passwords of its store's and queue's URLs,
    the summarizer's API key, and ``secrets``."""
    urls = (settings.url, settings.queue_url) if settings else ()
    return redactor(urls, secrets)


@dataclass(slots=True)
class _Process:
    """What one process builds once and reuses for every job it runs."""

    pid: int
    settings: WorkerSettings
    summarizer: Summarizer
    compactor: Compactor
    counter: TokenCounter
    redactor: Redactor
    _store: Any = None
    _extractor: Extractor | None = None
    _embedder: Embedder | AsyncEmbedder | None = None

    @property
    def extractor(self) -> Extractor:
        """The memory extraction jobs' extractor, made at first use (a worker that runs no
        extraction never needs its endpoint configured)."""
        if self._extractor is None:
            self._extractor = resolve_extractor(self.settings.extractor)
        return self._extractor

    def memory(self, namespace: str, prefix: str) -> RedisLongTermMemory:
        """The long-term memory extraction jobs store into, as the settings make it: with
        an embedder (made once), it merges restatements and supersedes updates."""
        settings = self.settings
        if settings.memory_embedder and self._embedder is None:
            self._embedder = resolve_embedder(settings.memory_embedder)
        return RedisLongTermMemory(
            self.store,
            namespace=namespace,
            prefix=prefix,
            embedder=self._embedder,
            merge_similar=self._embedder is not None,
            ttl_seconds=settings.memory_ttl,
            max_memories=settings.memory_cap,
        )

    @property
    def store(self) -> Any:
        """The store's client, made at first use: a cluster client connects when it is made,
        and a store that is down must fail a job (typed), not the worker's start."""
        if self._store is None:
            try:
                self._store = self.settings.store_client()
            except RedisFailure as exc:
                where = f"the history store at {redact_url(self.settings.url)}"
                raise redis_error(exc, self.redactor, where=where) from exc
        return self._store


@dataclass(slots=True)
class _Config:
    settings: WorkerSettings | None = None
    store: Any = None
    process: _Process | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_config = _Config()


def configure_worker(settings: WorkerSettings | None = None, *, store: Any = None) -> None:
    """Set the settings (and optionally the store client) this process's jobs use.

    Without a call, the first job reads :meth:`WorkerSettings.from_env`. A forked
    work horse inherits the settings but builds its own store client and summarizer,
    so no connection or HTTP session crosses a fork; an explicit ``store`` is reused.

    Args:
        settings: the settings; ``None`` to read the environment at the next job.
        store: a ready client for the history store (e.g. fakeredis in tests).
    """
    with _config.lock:
        _config.settings, _config.store, _config.process = settings, store, None


def _process() -> _Process:
    """This process's store client, summarizer, compactor and counter, built on first use."""
    with _config.lock:
        current = _config.process
        if current is None or current.pid != os.getpid():
            settings = _config.settings or WorkerSettings.from_env()
            current = _config.process = _Process(
                pid=os.getpid(),
                settings=settings,
                summarizer=resolve_summarizer(settings.summarizer),
                compactor=resolve_compactor(settings.compactor),
                # Off the hot path, a worker can afford to price its summaries exactly.
                counter=resolve_counter(settings.token_counter or DEFAULT_ENCODING),
                redactor=_redactor(settings),
                _store=_config.store,
            )
        return current


def _job_redactor() -> Redactor:
    """This process's redactor, once its jobs' settings are read."""
    process = _config.process
    return process.redactor if process is not None and process.pid == os.getpid() else NOTHING


def compact_conversation(
    namespace: str, conversation_id: str, prefix: str, policy: dict[str, Any]
) -> dict[str, Any]:
    """Compact one conversation: the RQ job named by ``COMPACTION_FUNCTION``.

    The compactor, summarizer, store and token counter come from the worker's settings; the
    payload names only the conversation and the policy. Whatever happens, the
    conversation's pending claim is released if it is still this job's, so the next
    ``maybe_compact`` can enqueue again.

    Args:
        namespace: the conversation's namespace.
        conversation_id: the conversation.
        prefix: the key prefix.
        policy: a :class:`~redis_history.compaction_policy.CompactionPolicy` as JSON.

    Returns:
        ``{"status", "dropped", "tokens_freed"}`` of the
        :class:`~redis_history.compaction.run.CompactionResult` (``compacted``, ``busy``, ...).

    Raises:
        ValueError: an unusable name or policy (pydantic's ``ValidationError`` is one).
        HistoryError: Redis failed, the stored log is malformed, or the compactor's
            replacement does not fit (``CompactorError``); the compactor's and
            summarizer's own errors pass through (nothing is written then).
    """
    job = rq.get_current_job()
    job_id = job.id if job is not None else None
    started = time.monotonic()
    outcome = "failed"
    try:
        result = _compact(job, namespace, conversation_id, prefix, policy)
    except Exception as exc:
        text = _job_redactor().exception(exc)  # before RQ logs and stores its traceback
        outcome = f"failed {type(exc).__name__}: {' '.join(text.split())[:300]}"
        raise
    else:
        outcome = f"{result.status} dropped={result.dropped} tokens_freed={result.tokens_freed}"
        return {
            "status": result.status,
            "dropped": result.dropped,
            "tokens_freed": result.tokens_freed,
        }
    finally:
        logger.info(
            "compaction job=%s conversation=%r/%r %s in %.3fs",
            job_id,
            namespace,
            conversation_id,
            outcome,
            time.monotonic() - started,
        )


def _compact(
    job: Job | None, namespace: str, conversation_id: str, prefix: str, policy: Any
) -> CompactionResult:
    """Validate the payload, compact, and release ``job``'s claim whatever happened.

    A job from a tenant's own queue (its ``origin``, which the worker set to the queue it
    took the job from) compacts only a conversation of that tenant, under the deployment's
    key prefix, with its policy held to the deployment's (:meth:`CompactionPolicy.within`).
    """
    job_id = job.id if job is not None else None
    process = _process()
    # checked before the conversation is touched, its claim too
    tenant = _tenant_job(process, job, namespace, prefix, "compactions")
    history = RedisHistory(
        process.store,
        conversation_id,
        namespace=namespace,
        prefix=prefix,
        token_counter=process.counter,
    )
    try:
        wanted = CompactionPolicy.model_validate(policy)
        if tenant is not None:
            wanted = wanted.within(process.settings.tenant_policy)
        return run_compaction(history, process.summarizer, wanted, compactor=process.compactor)
    finally:
        _release(history, job_id)


def _tenant_job(
    process: _Process, job: Job | None, namespace: str, prefix: str, what: str
) -> str | None:
    """The tenant whose own queue ``job`` came from (its ``origin``), or ``None``; a tenant's
    job must name its namespace, the deployment's prefix, and an id of its namespace."""
    job_id, origin = (job.id, job.origin) if job is not None else (None, None)
    tenant = process.settings.tenant_of(origin) if origin is not None else None
    if tenant is not None:
        expected = job_id_prefix(tenant, process.settings.prefix)
        own = (namespace, prefix) == (tenant, process.settings.prefix)
        if not own or not (job_id or "").startswith(expected):
            raise JobRefusedError(
                f"refused job {job_id}: queue {origin!r} takes {what} of namespace "
                f"{tenant!r} under prefix {process.settings.prefix!r} only"
            )
    return tenant


def _release(history: RedisHistory, job_id: str | None) -> None:
    """Release ``job_id``'s claim; a failure is logged, as the claim expires by itself."""
    if job_id is None:
        return  # run outside RQ: there is no claim of ours
    try:
        history.release_compaction_claim(job_id)
    except HistoryError:
        logger.warning(
            "could not release the compaction claim of job %s; it expires after claim_ttl_seconds",
            job_id,
            exc_info=True,
        )


def extract_memories(
    namespace: str, conversation_id: str, prefix: str, agent_id: str, user_id: str | None
) -> dict[str, Any]:
    """Extract one conversation's new messages into an owner's memories: the RQ job named by
    :data:`EXTRACTION_FUNCTION` (:class:`~redis_history.memory.extraction.MemoryExtraction`,
    with the worker's extractor, ``REDIS_HISTORY_EXTRACTOR``). A job from a tenant's queue
    extracts only that tenant's conversations, into its memories.

    Returns:
        ``{"status", "messages", "facts"}``: ``extracted``, ``nothing`` (no new message),
        ``busy`` (another run holds the conversation) or ``lost`` (its claim ran out: the
        messages will be extracted again, into the same memories).

    Raises:
        JobRefusedError: a tenant's job for another namespace or prefix.
        ValueError: an unusable name.
        HistoryError: Redis failed, or a store was refused; the extractor's errors pass
            through (``ExtractionError``).
    """
    job = rq.get_current_job()
    job_id = job.id if job is not None else None
    started = time.monotonic()
    outcome = "failed"
    try:
        result = _extract(job, namespace, conversation_id, prefix, (agent_id, user_id))
    except Exception as exc:
        text = _job_redactor().exception(exc)
        outcome = f"failed {type(exc).__name__}: {' '.join(text.split())[:300]}"
        raise
    else:
        outcome = " ".join(f"{k}={v}" for k, v in result.items())
        return result
    finally:
        logger.info(
            "extraction job=%s conversation=%r/%r %s in %.3fs",
            job_id,
            namespace,
            conversation_id,
            outcome,
            time.monotonic() - started,
        )


def _extract(
    job: Job | None,
    namespace: str,
    conversation_id: str,
    prefix: str,
    owner: tuple[str, str | None],
) -> dict[str, Any]:
    """Check a tenant's job is its own (as :func:`_compact` does), then extract into the
    memories of ``owner`` (agent, user)."""
    agent_id, user_id = owner
    process = _process()
    _tenant_job(process, job, namespace, prefix, "jobs")
    history = RedisHistory(process.store, conversation_id, namespace=namespace, prefix=prefix)
    memory = process.memory(namespace, prefix)
    lease_ms = max(1, round(process.settings.extraction_lease * 1000))
    run = MemoryExtraction(memory, process.extractor, agent_id, lease_ms=lease_ms)
    done = run.extract(history, user_id)
    status = (
        "busy" if done.busy else "lost" if done.lost else "extracted" if done.messages
        else "nothing"
    )  # fmt: skip
    return {"status": status, "messages": done.messages, "facts": done.facts, **done.outcomes}


# -- the allowlist ----------------------------------------------------------------------------


class CompactionOnlyJob(Job):
    """An RQ job that can only ever run ``COMPACTION_FUNCTION``.

    The function name is checked before anything is imported; callback names a
    job carries are never imported and its webhooks are never sent, since the
    compaction job uses neither and a forged job could name anything.
    """

    allowed_functions: ClassVar[frozenset[str]] = frozenset(
        {COMPACTION_FUNCTION, EXTRACTION_FUNCTION}
    )

    @property
    def func(self) -> Any:
        """The job's function, imported only when it is an allowed one.

        RQ's :meth:`~rq.job.Job.perform` reaches the function through this property
        alone, so a refusal here fails the job before anything is imported.
        """
        if self.func_name not in self.allowed_functions or self.instance is not None:
            raise JobRefusedError(
                f"refused job {self.id}: {self.func_name!r} is not an allowed function "
                f"(allowed: {', '.join(sorted(self.allowed_functions))})"
            )
        return super().func

    @property
    def success_callback(self) -> None:
        """Never a callback: a name from the queue is not imported."""
        return None

    @property
    def failure_callback(self) -> None:
        """Never a callback: a name from the queue is not imported."""
        return None

    @property
    def stopped_callback(self) -> None:
        """Never a callback: a name from the queue is not imported."""
        return None

    def send_webhooks(self, status: Any, *, exc_string: str | None = None) -> None:
        """Send nothing: a URL from the queue is not requested."""


def _job_class(job_class: type[Job] | str | None) -> type[CompactionOnlyJob]:
    """``CompactionOnlyJob`` for RQ's default (``rq worker`` always passes one), else a check."""
    if isinstance(job_class, str):
        job_class = pkgutil.resolve_name(job_class)
    if job_class is None or job_class is Job:
        return CompactionOnlyJob
    if isinstance(job_class, type) and issubclass(job_class, CompactionOnlyJob):
        return job_class
    raise TypeError(
        f"a compaction worker runs CompactionOnlyJob (or a subclass), not {job_class!r}"
    )


def _json_only(serializer: Any) -> Any:
    """``JSONSerializer`` for ``None``; refuse anything else that is not it."""
    if serializer is None or resolve_serializer(serializer) is JSONSerializer:
        return JSONSerializer
    raise ValueError(
        "a compaction worker only reads JSON jobs: pass --serializer rq.serializers.JSONSerializer "
        f"(got {serializer!r}; pickle would run code from the queue)"
    )


class _CompactionOnlyWorker(BaseWorker):
    """Forces :class:`CompactionOnlyJob` and ``JSONSerializer`` on an RQ worker class.

    ``rq worker`` always passes ``--job-class`` (``rq.job.Job`` by default) and
    ``--serializer`` (pickle by default): the default job class is replaced, a
    pickle serializer refuses to start.
    """

    metrics: WorkerMetrics | None = None
    """Where finished jobs and failed heartbeats are counted; ``None`` counts nothing."""

    def __init__(
        self,
        queues: Any,
        *,
        job_class: type[Job] | str | None = None,
        serializer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            queues, job_class=_job_class(job_class), serializer=_json_only(serializer), **kwargs
        )
        for queue in self.queues:
            if queue.serializer is not JSONSerializer:
                raise ValueError(f"queue {queue.name!r} does not use JSONSerializer")
        self.redact = _redactor(_config.settings, client_secrets(self.connection))
        """Masks the worker's secrets in what RQ logs and stores of a failed job."""
        _preload()

    def execute_job(self, job: Job, queue: rq.Queue) -> None:
        """Run one job (in a work horse, when forking), then count it in :attr:`metrics`.

        The job is first held to the queue it was taken from (:func:`_admit`). The outcome
        is read back from RQ in this process, after the horse has exited: what a horse
        counts itself is lost with it.
        """
        _admit(job, queue, _process().settings)
        started = time.monotonic()
        try:
            super().execute_job(job, queue)
        finally:
            if self.metrics is not None:
                _count_job(self.metrics, job, time.monotonic() - started)

    def _heartbeat_failed(self) -> None:
        if self.metrics is not None:
            self.metrics.heartbeat_failed()

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        """RQ's report of a job's error (logged, then stored), its secrets masked first."""
        if isinstance(exc_info[1], BaseException):
            self.redact.exception(exc_info[1])
        super().handle_exception(job, *exc_info)

    def handle_job_failure(
        self,
        job: Job,
        queue: rq.Queue,
        started_job_registry: StartedJobRegistry | None = None,
        exc_string: str = "",
        execution: Execution | None = None,
    ) -> None:
        """RQ's record of a failed job, the traceback it stores redacted."""
        super().handle_job_failure(
            job, queue, started_job_registry, self.redact(exc_string), execution
        )


def _admit(job: Job, queue: rq.Queue, settings: WorkerSettings) -> None:
    """Hold ``job`` to the queue it was taken from, whatever its hash says: its ``origin`` is
    that queue (the job function trusts nothing else). A tenant wrote its own job's hash, so
    every field RQ acts on besides the call is the worker's: the deployment's time limit and
    result TTLs, and no retry, repeat, rate limit, group, TTL or description of its own."""
    job.origin = queue.name
    if settings.tenant_of(queue.name) is None:
        return
    limit = settings.tenant_policy.job_timeout_seconds
    if not isinstance(job.timeout, int) or not 0 < job.timeout <= limit:
        job.timeout = limit
    job.result_ttl, job.failure_ttl, job.ttl = RESULT_TTL, FAILURE_TTL, None
    job.retries_left, job.retry_intervals = None, None
    job.repeats_left, job.repeat_intervals = None, None
    job.rate_limit_key, job.rate_limit_concurrency = None, None
    kind = "memory extraction" if job.func_name == EXTRACTION_FUNCTION else "compaction"
    job.group_id, job.description = None, f"{kind} from queue {queue.name}"


_FAILED_STATUSES = frozenset({JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED})


def _count_job(metrics: WorkerMetrics, job: Job, seconds: float) -> None:
    """Count ``job``'s outcome as RQ recorded it: its result's status, or ``failed``."""
    from redis_history.compaction.metrics import (  # noqa: PLC0415  (the metrics extra)
        EXTRACTION_OUTCOMES,
        OUTCOMES,
    )

    try:
        status = job.get_status(refresh=True)
        result = job.latest_result() if status == JobStatus.FINISHED else None
    except _OUTAGE as exc:
        logger.warning("job %s not counted: its outcome is unreadable (%s)", job.id, exc)
        return
    value = result.return_value if result is not None else None
    outcome = value.get("status") if isinstance(value, dict) else None
    if job.func_name == EXTRACTION_FUNCTION:
        failed = status in _FAILED_STATUSES or outcome not in EXTRACTION_OUTCOMES
        metrics.extraction_done("failed" if failed else str(outcome), value)
        return
    if status in _FAILED_STATUSES:
        metrics.job_done("failed", seconds)
        return
    if outcome in OUTCOMES and outcome != "failed":
        metrics.job_done(outcome, seconds, value)
    else:
        logger.warning("job %s not counted: status %s, result %r", job.id, status, value)


def _preload() -> None:
    """Read once, before any fork, what each forked horse would otherwise read for every job.

    That is every Lua script (read from package data, includes expanded, hashed)
    and redis-py's driver metadata for the clients a horse opens (its version,
    looked up in the package metadata per connection otherwise): about 2.5 ms of
    a job each, measured by ``benchmarks/bench_compaction.py``.
    """
    for name in script_names():
        script(name)
    driver_info()


_OUTAGE = (redis.ConnectionError, redis.TimeoutError)
"""What an unreachable, restarting or stalled Redis raises (``AuthenticationError`` aside)."""


class _RidesOutOutages(BaseWorker):
    """Keeps an RQ worker serving through outages of its queue's Redis.

    RQ 3.0 retries only around its dequeue (with a backoff up to a minute); a
    connection error or timeout from anywhere else in the work loop ends the worker
    ("found an unhandled exception, quitting", or "Redis connection timeout,
    quitting"), and one during its teardown turns a clean shutdown into a crash.
    Each RQ hook that talks to Redis outside that retry is overridden here to note
    the outage and go on: the worker
    state and heartbeats (informational, with TTLs far longer than an outage), the
    suspension check and maintenance (tried again on the next round), the
    bookkeeping around a job (a job whose outcome RQ could not record is settled by
    RQ's registry maintenance later; its claim expires), and registering the
    worker's death (its key expires). While idle, the worker waits for its Redis in
    :meth:`heartbeat`, with a backoff doubling up to :attr:`outage_max_delay`.
    Wrong credentials (``AuthenticationError``) are not an outage and still end it.
    """

    max_connection_wait_time = 5.0
    """Cap of RQ's own backoff in its dequeue loop (RQ's default is 60 s)."""
    outage_first_delay: ClassVar[float] = 0.5
    """The first pause between two attempts to reach the queue's Redis."""
    outage_max_delay: ClassVar[float] = 5.0
    """The longest pause between two attempts to reach the queue's Redis."""
    listener_retry_delay: ClassVar[float] = 2.0
    """The pause before RQ's command listener (a pubsub thread) reconnects, as in RQ."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._outage_since: float | None = None
        self._outage_delay = self.outage_first_delay
        self._outage_guard = threading.Lock()
        super().__init__(*args, **kwargs)

    # -- bookkeeping of one outage ----------------------------------------------------------

    def _outage_begins(self, what: str, exc: Exception) -> None:
        with self._outage_guard:
            if self._outage_since is None:
                self._outage_since = time.monotonic()
                logger.warning(
                    "worker %s: the queue's Redis is unavailable (%s: %s: %s); riding it out",
                    self.name,
                    what,
                    type(exc).__name__,
                    exc,
                )

    def _outage_ends(self) -> None:
        with self._outage_guard:
            if self._outage_since is not None:
                logger.info(
                    "worker %s: the queue's Redis is back after %.1fs",
                    self.name,
                    time.monotonic() - self._outage_since,
                )
                self._outage_since = None
            self._outage_delay = self.outage_first_delay

    def _outage_pause(self) -> None:
        delay = self._outage_delay
        self._outage_delay = min(self.outage_max_delay, delay * 2)
        self._sleep(delay)

    def _sleep(self, seconds: float) -> None:
        """Wait before the next attempt (a SIGTERM meanwhile stops the worker, as in RQ)."""
        time.sleep(seconds)

    def _heartbeat_failed(self) -> None:
        """Called for each heartbeat the queue's Redis did not take (a hook for metrics)."""

    @contextlib.contextmanager
    def _riding_out(self, what: str, *, heartbeat: bool = False) -> Iterator[None]:
        """Note an outage of the queue's Redis instead of letting it end the worker."""
        try:
            yield
        except AuthenticationError:
            raise  # wrong credentials: no outage to wait for
        except _OUTAGE as exc:
            if heartbeat:
                self._heartbeat_failed()
            self._outage_begins(what, exc)

    # -- RQ's hooks -------------------------------------------------------------------------

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        """RQ's heartbeat; an idle worker waits out an outage here.

        RQ heartbeats first in every dequeue attempt and after every job, so this
        is where an idle worker waits for its Redis. While a job runs the outage is
        only noted: the worker must go on watching its work horse.
        """
        if pipeline is not None:  # only queued: whoever executes the pipeline sends it
            super().heartbeat(timeout, pipeline)
            return
        while True:
            with self._riding_out("heartbeat", heartbeat=True):
                super().heartbeat(timeout)
                self._outage_ends()
                return
            if self.get_state() == WorkerStatus.BUSY:
                return
            self._outage_pause()

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> None:
        """RQ's state update (kept in memory first); an outage leaves Redis's copy stale."""
        if pipeline is not None:
            super().set_state(state, pipeline)
            return
        with self._riding_out(f"setting its state to {state}"):
            super().set_state(state)

    def maintain_heartbeats(self, job: Job, execution: Execution) -> None:
        """RQ's heartbeats while a horse works; an outage skips one, the horse goes on."""
        with self._riding_out(f"heartbeat of job {job.id}", heartbeat=True):
            super().maintain_heartbeats(job, execution)
            self._outage_ends()

    def check_for_suspension(self, burst: bool) -> None:
        """RQ's ``rq suspend`` check; during an outage the dequeue loop waits instead."""
        with self._riding_out("checking for suspension"):
            super().check_for_suspension(burst)

    def run_maintenance_tasks(self) -> None:
        """RQ's registry cleaning; an outage leaves it due, so the next round runs it."""
        with self._riding_out("maintenance"):
            super().run_maintenance_tasks()  # type: ignore[no-untyped-call]

    def execute_job(self, job: Job, queue: rq.Queue) -> None:
        """Run one job; an outage while RQ records it leaves the job to RQ's maintenance.

        Only RQ's own bookkeeping can raise here: a job's errors are recorded by
        ``perform_job``, and during the job the hooks above absorb outages, so no
        work horse is still running when this catches one.
        """
        try:
            super().execute_job(job, queue)
        except AuthenticationError:
            raise
        except _OUTAGE as exc:
            self._outage_begins(f"recording job {job.id}", exc)
            logger.warning(
                "worker %s: RQ could not record job %s; its registries settle it later",
                self.name,
                job.id,
            )
            self.executions.clear()  # else the next job's horse would be handed this one
            self.set_state(WorkerStatus.IDLE)

    def set_shutdown_requested_date(self) -> None:
        """Recorded from the SIGTERM handler mid-job; an outage must not raise into the job."""
        with self._riding_out("recording a shutdown request"):
            super().set_shutdown_requested_date()  # type: ignore[no-untyped-call]

    def register_death(self) -> None:
        """RQ's farewell; during an outage the worker's key simply expires."""
        with self._riding_out("registering its death"):
            super().register_death()  # type: ignore[no-untyped-call]

    def unsubscribe(self) -> None:
        """Stop listening for RQ commands, also when UNSUBSCRIBE cannot be sent."""
        try:
            super().unsubscribe()  # type: ignore[no-untyped-call]
        except AuthenticationError:
            raise
        except _OUTAGE as exc:
            self._outage_begins("unsubscribing", exc)
            if self.pubsub_thread is not None:
                self.pubsub_thread.stop()
                self.pubsub_thread.join(timeout=1)
            if self.pubsub is not None:
                self.pubsub.close()

    def subscribe(self) -> None:
        """Start RQ's command listener (``rq`` commands over pubsub) as RQ does, but with
        :meth:`_listener_failed` as its thread's handler: RQ's own lets a timeout end the
        listener, and RQ takes no other handler but by overriding a private method."""
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = pubsub = self.connection.pubsub()  # type: ignore[no-untyped-call]
        pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = pubsub.run_in_thread(
            sleep_time=60, daemon=True, exception_handler=self._listener_failed
        )

    def _listener_failed(
        self, exc: BaseException, pubsub: PubSub, pubsub_thread: PubSubWorkerThread
    ) -> None:
        """Keep the command listener through outages (timeouts too), reconnecting quietly;
        refused credentials are logged and tried again, and anything else ends it, as in RQ.

        The work loop reports the outage; redis-py resubscribes on reconnection.
        """
        if not isinstance(exc, _OUTAGE):
            self.log.warning("Worker %s: pubsub thread exiting on %s", self.name, exc)
            raise exc
        if isinstance(exc, AuthenticationError):
            self.log.error("Worker %s: command listener refused by Redis: %s", self.name, exc)
        else:
            logger.debug("worker %s: command listener: %s; reconnecting", self.name, exc)
        time.sleep(self.listener_retry_delay)


class CompactionWorker(_CompactionOnlyWorker, _RidesOutOutages, Worker):
    """RQ's forking worker, limited to compaction jobs: ``rq worker --worker-class`` this."""

    def main_work_horse(self, job: Job, queue: rq.Queue) -> None:
        """RQ's work horse, its garbage collector kept off the objects it inherited.

        A horse inherits the worker's allocation counts, so once the worker is near
        its next full collection every horse runs one: over all the worker's objects,
        copying each page it touches (17-25 ms, in 33 of 153 jobs of a long-running
        worker: ``docs/benchmarks.md``). :func:`gc.freeze` moves the inherited objects
        out of the collector's reach in O(1). This is the one place the library drives
        the collector, and it is not a caller's process: the horse is a child this worker
        forks for one job and which exits after it; the freeze comes before the job runs.
        """
        gc.freeze()
        super().main_work_horse(job, queue)


class SimpleCompactionWorker(_CompactionOnlyWorker, _RidesOutOutages, SimpleWorker):
    """RQ's in-process worker, limited to compaction jobs (tests, or where fork is unsafe)."""


def _depth(queue: rq.Queue) -> Callable[[], tuple[int, int]]:
    """Reads ``queue``'s jobs waiting and running."""
    return lambda: (queue.count, queue.started_job_registry.count)


def _serve_metrics(queues: Sequence[rq.Queue], port: int) -> WorkerMetrics:
    """The worker's metrics, served on ``port`` at ``/metrics`` from now on, with the depth of
    each of ``queues`` (the shared one, then the tenants')."""
    try:
        from redis_history.compaction.metrics import WorkerMetrics  # noqa: PLC0415
    except ImportError as exc:
        raise ValueError(
            f"serving metrics needs prometheus_client ({exc}): pip install 'redis-history[metrics]'"
        ) from exc
    metrics = WorkerMetrics(queues[0].name, _depth(queues[0]))
    for queue in queues[1:]:
        metrics.watch(queue.name, _depth(queue))
    metrics.serve(port)
    logger.info("serving Prometheus metrics at http://0.0.0.0:%d/metrics", port)
    return metrics


def run_worker(
    settings: WorkerSettings | None = None,
    burst: bool = False,
    *,
    name: str | None = None,
    worker_class: type[BaseWorker] = CompactionWorker,
    logging_level: str = "INFO",
) -> bool:
    """Run a compaction worker on the settings' queue until stopped (or, in burst, drained).

    The compactor, summarizer and token counter are resolved first, so a bad
    configuration stops the worker before it takes a job.

    Args:
        settings: where the store and queue are; :meth:`WorkerSettings.from_env` by default.
        burst: quit once the queue is empty.
        name: the worker's name in RQ (unique among live workers); random by default.
        worker_class: :class:`CompactionWorker` (forks per job) or :class:`SimpleCompactionWorker`.
        logging_level: for RQ's and this module's log lines.

    Returns:
        Whether any job was processed.

    Raises:
        StoreUnavailableError: the queue's Redis cannot be reached as the worker starts
            (once it runs, outages are waited out).
        OSError: the metrics port cannot be listened on.
        AccessDeniedError: the queue's Redis refused the credentials or the ACL denied
            a command.
        ValueError: unusable settings (compactor, summarizer, token counter), or a metrics
            port without ``prometheus_client`` installed.
        TypeError: a ``worker_class`` that does not enforce the allowlist.
    """
    if not issubclass(worker_class, _CompactionOnlyWorker):
        raise TypeError(f"{worker_class!r} does not enforce the compaction allowlist")
    settings = settings or WorkerSettings.from_env()
    for logger_name in (__name__, "redis_history.compaction.run"):  # the lock's heartbeat reports
        setup_loghandlers(logging_level, name=logger_name)
    configure_worker(settings)
    try:
        _process()  # fail fast; a forked horse rebuilds the client and summarizer
    except TypeError as exc:
        raise ValueError(f"unusable worker settings: {exc}") from exc
    connection = settings.queue_client()
    try:
        worker = worker_class(
            list(settings.queues), name=name, connection=connection, serializer=JSONSerializer
        )
        if settings.metrics_port is not None:
            worker.metrics = _serve_metrics(worker.queues, settings.metrics_port)
        # Round robin: a tenant that fills its queue delays the others' jobs by one each.
        strategy = DequeueStrategy.ROUND_ROBIN
        return bool(
            worker.work(burst=burst, logging_level=logging_level, dequeue_strategy=strategy)
        )
    except RedisFailure as exc:
        where = f"the queue's Redis at {redact_url(settings.queue_redis_url)}"
        raise redis_error(exc, _redactor(settings), where=where) from exc
    finally:
        connection.close()
