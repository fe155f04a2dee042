"""Every ``REDIS_HISTORY_*`` environment variable, with its default and meaning, in one place.

Each :class:`Variable` names one variable, its default and what it means, and
reads and checks it; :data:`VARIABLES` lists them all (a test checks that no
other ``REDIS_HISTORY_*`` name is used in the package, ``worker/`` or the
docs). :class:`WorkerSettings` gathers what a compaction worker reads.
Unset and empty variables both mean the default.

This module imports no ``rq``: pods, the CLI and the summarizers read it too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from functools import cache
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import redis
from pydantic import ValidationError
from redis.cluster import RedisCluster

from redis_history.compaction_policy import CompactionPolicy
from redis_history.redact import Redactor, redact_url, url_secrets
from redis_history.store.keys import DEFAULT_PREFIX, tenant_queue, validate_scope

if TYPE_CHECKING:
    from redis.driver_info import DriverInfo

__all__ = [
    "CLUSTER",
    "COMPACTOR",
    "DEFAULT_QUEUE",
    "DEFAULT_URL",
    "EMBEDDER_API_KEY_ENV",
    "EMBEDDER_BASE_URL",
    "EMBEDDER_DIMENSIONS",
    "EMBEDDER_MODEL",
    "EXTRACTION_LEASE",
    "EXTRACTOR",
    "MEMORY_CAP",
    "MEMORY_EMBEDDER",
    "MEMORY_TTL",
    "METRICS_PORT",
    "PREFIX",
    "QUEUE",
    "QUEUE_URL",
    "SUMMARIZER",
    "SUMMARIZER_API_KEY_ENV",
    "SUMMARIZER_BASE_URL",
    "SUMMARIZER_MAX_RETRIES",
    "SUMMARIZER_MODEL",
    "SUMMARIZER_TIMEOUT",
    "TENANTS",
    "TENANT_POLICY",
    "TOKEN_COUNTER",
    "URL",
    "VARIABLES",
    "Variable",
    "WorkerSettings",
    "redactor",
]

T = TypeVar("T")


def _text(name: str, raw: str) -> str:
    return raw


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def _flag(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE | _FALSE:
        return lowered in _TRUE
    raise ValueError(f"{name} must be one of 1/true/yes/on or 0/false/no/off, got {raw!r}")


def _seconds(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None


def _count(name: str, raw: str) -> int:
    if not raw.isdigit():
        raise ValueError(f"{name} must be a whole number >= 0, got {raw!r}")
    return int(raw)


def _tenants(name: str, raw: str) -> tuple[str, ...]:
    namespaces = tuple(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))
    for namespace in namespaces:
        try:
            validate_scope(namespace, DEFAULT_PREFIX)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return namespaces


def _policy(name: str, raw: str) -> CompactionPolicy:
    try:
        return CompactionPolicy.model_validate_json(raw)
    except ValidationError as exc:
        lines = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'policy'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"{name} must be a compaction policy as JSON: {lines}") from None


def _prefix(name: str, raw: str) -> str:
    try:
        validate_scope(DEFAULT_PREFIX, raw)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return raw


def _port(name: str, raw: str) -> int | None:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"{name} must be a TCP port, 1 to 65535, got {raw!r}")
    return int(raw)


@dataclass(frozen=True, slots=True)
class Variable(Generic[T]):
    """One environment variable: its name, its default, what it means and how it is read."""

    name: str
    """The variable's name, ``REDIS_HISTORY_...``."""
    default: T
    """The value when the variable is unset or empty."""
    meaning: str
    """What the variable sets, in one line."""
    parse: Callable[[str, str], T]
    """Turns ``(name, raw text)`` into the value; raises ``ValueError`` naming the variable."""

    def read(self, environ: Mapping[str, str] | None = None) -> T:
        """The variable's value.

        Args:
            environ: the variables to read; ``os.environ`` when ``None``.

        Returns:
            The parsed value, or :attr:`default` when the variable is unset or empty.

        Raises:
            ValueError: a value that does not parse; the message names the variable.
        """
        raw = (os.environ if environ is None else environ).get(self.name, "")
        return self.default if raw == "" else self.parse(self.name, raw)


URL: Variable[str] = Variable(
    "REDIS_HISTORY_URL",
    "redis://127.0.0.1:6379/0",
    "the history store; with REDIS_HISTORY_CLUSTER, any one node of the cluster",
    _text,
)
CLUSTER: Variable[bool] = Variable(
    "REDIS_HISTORY_CLUSTER",
    False,
    "1, true, yes or on: the store is a Redis Cluster (0, false, no, off or unset: it is not)",
    _flag,
)
QUEUE_URL: Variable[str | None] = Variable(
    "REDIS_HISTORY_QUEUE_URL",
    None,
    "the RQ queue's Redis; the store when unset (required with a cluster: RQ needs a "
    "standalone Redis)",
    _text,
)
QUEUE: Variable[str] = Variable(
    "REDIS_HISTORY_QUEUE", "redis-history", "the compaction queue's name", _text
)
TENANTS: Variable[tuple[str, ...]] = Variable(
    "REDIS_HISTORY_TENANTS",
    (),
    "namespaces, comma-separated, whose pods enqueue on a queue of their own "
    "(QUEUE:NAMESPACE), which the workers serve too, each job only for its namespace",
    _tenants,
)
TENANT_POLICY: Variable[CompactionPolicy] = Variable(
    "REDIS_HISTORY_TENANT_POLICY",
    CompactionPolicy(),
    "the deployment's compaction policy for the tenants' jobs, as JSON: a job keeps at least "
    "what it keeps, and runs under its archive caps and time limits",
    _policy,
)
PREFIX: Variable[str] = Variable(
    "REDIS_HISTORY_PREFIX",
    DEFAULT_PREFIX,
    "the key prefix of the tenants' conversations (a tenant's job must name it)",
    _prefix,
)
SUMMARIZER: Variable[str] = Variable(
    "REDIS_HISTORY_SUMMARIZER",
    "extractive",
    "the workers' summarizer: extractive, openai, or a dotted path 'package.module:attr'",
    _text,
)
EXTRACTOR: Variable[str] = Variable(
    "REDIS_HISTORY_EXTRACTOR",
    "rules",
    "the workers' memory extractor: rules, openai, or a dotted path 'package.module:attr'",
    _text,
)
EXTRACTION_LEASE: Variable[float] = Variable(
    "REDIS_HISTORY_EXTRACTION_LEASE",
    120.0,
    "seconds a memory extraction job holds its conversation: one that dies is taken over after",
    _seconds,
)
MEMORY_EMBEDDER: Variable[str | None] = Variable(
    "REDIS_HISTORY_MEMORY_EMBEDDER",
    None,
    "the embedder of the memories extraction jobs keep (offline, openai, hashing, or a dotted "
    "path): they then merge restatements and supersede updates; unset: keywords only",
    _text,
)
MEMORY_TTL: Variable[float | None] = Variable(
    "REDIS_HISTORY_MEMORY_TTL",
    None,
    "seconds an extracted memory is kept after it was last stated (unset: for ever)",
    _seconds,
)
MEMORY_CAP: Variable[int | None] = Variable(
    "REDIS_HISTORY_MEMORY_CAP",
    None,
    "the most memories extraction jobs keep per owner, the least recently used evicted "
    "(unset: stores past 5,000 are refused)",
    _count,
)
COMPACTOR: Variable[str] = Variable(
    "REDIS_HISTORY_COMPACTOR",
    "summarize",
    "what replaces the oldest turns: summarize, elide-tool-output, or a dotted path "
    "'package.module:attr'",
    _text,
)
TOKEN_COUNTER: Variable[str | None] = Variable(
    "REDIS_HISTORY_TOKEN_COUNTER",
    None,
    "the counter that prices the workers' summaries; unset: the exact o200k_base counter "
    "(a worker is off the hot path)",
    _text,
)
METRICS_PORT: Variable[int | None] = Variable(
    "REDIS_HISTORY_METRICS_PORT",
    None,
    "the TCP port a worker serves Prometheus metrics on at /metrics (unset: no metrics)",
    _port,
)
SUMMARIZER_BASE_URL: Variable[str] = Variable(
    "REDIS_HISTORY_SUMMARIZER_BASE_URL",
    "https://api.openai.com/v1",
    "the openai summarizer's API root: any OpenAI-compatible chat-completions endpoint",
    _text,
)
SUMMARIZER_MODEL: Variable[str] = Variable(
    "REDIS_HISTORY_SUMMARIZER_MODEL", "gpt-4o-mini", "the openai summarizer's model", _text
)
SUMMARIZER_API_KEY_ENV: Variable[str] = Variable(
    "REDIS_HISTORY_SUMMARIZER_API_KEY_ENV",
    "OPENAI_API_KEY",
    "the name of the variable that holds the openai summarizer's API key",
    _text,
)
SUMMARIZER_TIMEOUT: Variable[float] = Variable(
    "REDIS_HISTORY_SUMMARIZER_TIMEOUT",
    60.0,
    "the openai summarizer's connect and read timeout per attempt, in seconds",
    _seconds,
)
SUMMARIZER_MAX_RETRIES: Variable[int] = Variable(
    "REDIS_HISTORY_SUMMARIZER_MAX_RETRIES",
    2,
    "how often the openai summarizer retries a failed request (0: never)",
    _count,
)
EMBEDDER_BASE_URL: Variable[str] = Variable(
    "REDIS_HISTORY_EMBEDDER_BASE_URL",
    "https://api.openai.com/v1",
    "the openai embedder's API root: any OpenAI-compatible embeddings endpoint",
    _text,
)
EMBEDDER_MODEL: Variable[str] = Variable(
    "REDIS_HISTORY_EMBEDDER_MODEL",
    "text-embedding-3-small",
    "the openai embedder's model",
    _text,
)
EMBEDDER_DIMENSIONS: Variable[int] = Variable(
    "REDIS_HISTORY_EMBEDDER_DIMENSIONS",
    256,
    "the length of the openai embedder's vectors (asked of the model, which must give them)",
    _count,
)
EMBEDDER_API_KEY_ENV: Variable[str] = Variable(
    "REDIS_HISTORY_EMBEDDER_API_KEY_ENV",
    "OPENAI_API_KEY",
    "the name of the variable that holds the openai embedder's API key",
    _text,
)
ACL_PASSWORD: Variable[str | None] = Variable(
    "REDIS_HISTORY_ACL_PASSWORD",
    None,
    "the password `redis-history acl` gives the tenant's user, when --password is not given "
    "(kept out of shell history and process lists)",
    _text,
)

VARIABLES: tuple[Variable[Any], ...] = (
    URL,
    CLUSTER,
    QUEUE_URL,
    QUEUE,
    TENANTS,
    TENANT_POLICY,
    PREFIX,
    SUMMARIZER,
    EXTRACTOR,
    EXTRACTION_LEASE,
    MEMORY_EMBEDDER,
    MEMORY_TTL,
    MEMORY_CAP,
    COMPACTOR,
    TOKEN_COUNTER,
    METRICS_PORT,
    SUMMARIZER_BASE_URL,
    SUMMARIZER_MODEL,
    SUMMARIZER_API_KEY_ENV,
    SUMMARIZER_TIMEOUT,
    SUMMARIZER_MAX_RETRIES,
    EMBEDDER_BASE_URL,
    EMBEDDER_MODEL,
    EMBEDDER_DIMENSIONS,
    EMBEDDER_API_KEY_ENV,
    ACL_PASSWORD,
)
"""Every variable the package reads, in the order ``docs/operations.md`` lists them."""

DEFAULT_URL = URL.default
"""The history store when nothing is configured."""
DEFAULT_QUEUE = QUEUE.default
"""The compaction queue's name when nothing is configured."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Where a worker finds its store and queue, and which compactor and summarizer it runs."""

    url: str = URL.default
    """The history store's URL (one node's URL when :attr:`cluster`)."""
    cluster: bool = CLUSTER.default
    """The store is a Redis Cluster."""
    queue_url: str | None = QUEUE_URL.default
    """The RQ queue's Redis; ``None`` for the store itself (not allowed with a cluster)."""
    queue: str = QUEUE.default
    """The RQ queue name."""
    tenants: tuple[str, ...] = TENANTS.default
    """Namespaces whose pods enqueue on a queue of their own, which the worker serves too."""
    tenant_policy: CompactionPolicy = TENANT_POLICY.default
    """What the tenants' jobs may keep and archive at least, and their time limits."""
    prefix: str = PREFIX.default
    """The key prefix of the tenants' conversations."""
    summarizer: str = SUMMARIZER.default
    """An alias or dotted path for :func:`~redis_history.resolve_summarizer`."""
    extractor: str = EXTRACTOR.default
    """An alias or dotted path for the memory extraction jobs' extractor
    (:func:`~redis_history.memory.extraction.resolve_extractor`)."""
    extraction_lease: float = EXTRACTION_LEASE.default
    """Seconds a memory extraction job holds its conversation's claim."""
    memory_embedder: str | None = MEMORY_EMBEDDER.default
    """The embedder of the memories extraction jobs keep (they merge restatements and
    supersede updates with one), or ``None`` for keywords alone."""
    memory_ttl: float | None = MEMORY_TTL.default
    """Seconds an extracted memory is kept after it was last stated, or ``None``."""
    memory_cap: int | None = MEMORY_CAP.default
    """The most memories extraction jobs keep per owner, or ``None``."""
    compactor: str = COMPACTOR.default
    """An alias or dotted path for :func:`~redis_history.resolve_compactor`."""
    token_counter: str | None = TOKEN_COUNTER.default
    """The counter that prices summaries; ``None`` for the exact ``o200k_base`` (unlike the
    pods' default estimate: a worker is off the hot path)."""
    metrics_port: int | None = METRICS_PORT.default
    """The port of the worker's Prometheus ``/metrics`` endpoint; ``None`` serves none."""

    def __post_init__(self) -> None:
        if not self.url:
            raise ValueError("the history store URL is empty")
        if not self.queue:
            raise ValueError("the queue name is empty")
        for namespace in self.tenants:
            validate_scope(namespace, self.prefix)
        if self.cluster and not self.queue_url:
            raise ValueError(
                f"{QUEUE_URL.name} is required when the history is a Redis Cluster: "
                "RQ needs a standalone Redis"
            )

    def __repr__(self) -> str:
        """The settings, the URLs' passwords masked."""
        shown = {field.name: getattr(self, field.name) for field in fields(self)}
        shown["url"] = redact_url(self.url)
        shown["queue_url"] = self.queue_url and redact_url(self.queue_url)
        return f"WorkerSettings({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerSettings:
        """Settings from the ``REDIS_HISTORY_*`` variables of :data:`VARIABLES`.

        Args:
            environ: the variables to read; ``os.environ`` by default.

        Returns:
            The settings, defaults filled in.

        Raises:
            ValueError: a malformed flag, or a cluster without a queue URL.
        """
        env = os.environ if environ is None else environ
        return cls(
            url=URL.read(env),
            cluster=CLUSTER.read(env),
            queue_url=QUEUE_URL.read(env),
            queue=QUEUE.read(env),
            tenants=TENANTS.read(env),
            tenant_policy=TENANT_POLICY.read(env),
            prefix=PREFIX.read(env),
            summarizer=SUMMARIZER.read(env),
            extractor=EXTRACTOR.read(env),
            extraction_lease=EXTRACTION_LEASE.read(env),
            memory_embedder=MEMORY_EMBEDDER.read(env),
            memory_ttl=MEMORY_TTL.read(env),
            memory_cap=MEMORY_CAP.read(env),
            compactor=COMPACTOR.read(env),
            token_counter=TOKEN_COUNTER.read(env),
            metrics_port=METRICS_PORT.read(env),
        )

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues a worker serves: the shared one, then each tenant's."""
        return (self.queue, *(tenant_queue(self.queue, ns) for ns in self.tenants))

    def tenant_of(self, queue: str) -> str | None:
        """The namespace whose own queue ``queue`` is, or ``None`` for the shared queue (or
        one the worker does not serve)."""
        for namespace in self.tenants:
            if queue == tenant_queue(self.queue, namespace):
                return namespace
        return None

    @property
    def queue_redis_url(self) -> str:
        """The URL of the Redis that holds the RQ queue."""
        return self.queue_url or self.url

    def store_client(self) -> redis.Redis | RedisCluster:
        """A new client for the history store (a cluster client when :attr:`cluster`)."""
        if self.cluster:
            return RedisCluster.from_url(self.url, **_client_options())
        return redis.Redis.from_url(self.url, **_client_options())

    def queue_client(self) -> redis.Redis:
        """A new client for the queue's Redis."""
        return redis.Redis.from_url(self.queue_redis_url, **_client_options())


def redactor(
    urls: Iterable[str | None] = (),
    secrets: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Redactor:
    """Masks what a process knows to be secret: the passwords of ``urls`` and of the store's
    and queue's URLs in the environment, the openai summarizer's API key (in the variable
    ``SUMMARIZER_API_KEY_ENV`` names), a tenant's password for ``acl``, and ``secrets``."""
    env = os.environ if environ is None else environ
    every = (*urls, URL.read(env), QUEUE_URL.read(env))
    key = env.get(SUMMARIZER_API_KEY_ENV.read(env))
    return Redactor.of(
        *(s for url in every for s in url_secrets(url)), key, ACL_PASSWORD.read(env), *secrets
    )


@cache
def driver_info() -> DriverInfo | None:
    """redis-py's ``CLIENT SETINFO`` name and version, looked up once for all the worker's clients.

    Without it redis-py reads its version from the package metadata for every
    connection it makes (about 2 ms), and a forking worker's horse makes two per job.
    ``None`` before redis-py 7.2, which has no ``DriverInfo`` and reads the version
    once, when it is imported.
    """
    try:
        from redis.driver_info import DriverInfo  # noqa: PLC0415  (redis-py 7.2 and later)
    except ImportError:
        return None
    return DriverInfo()


def _client_options() -> dict[str, Any]:
    """The options every client of the worker is made with: :func:`driver_info`, if any."""
    info = driver_info()
    return {} if info is None else {"driver_info": info}
