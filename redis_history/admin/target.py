"""Where an operator command works: one store (a Redis or a Redis Cluster), a namespace and
the key prefix, with the clients of its primaries for what runs on every node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster

from redis_history.errors import ConversationNotFoundError, HistoryError
from redis_history.redact import Redactor, client_secrets, redact_url, url_secrets
from redis_history.settings import URL
from redis_history.store.history import RedisHistory
from redis_history.store.keys import DEFAULT_NAMESPACE, DEFAULT_PREFIX, validate_scope
from redis_history.wire import RedisFailure, bytes_client, redis_error
from redis_history.wire.call import Call

__all__ = ["CONNECT_TIMEOUT", "Target", "run_call"]

T = TypeVar("T")

CONNECT_TIMEOUT = 10.0
"""Seconds an operator command waits for a connection before it reports Redis unavailable."""


@dataclass(slots=True)
class Target:
    """A store to inspect or change: its client, the namespace, the key prefix, and the URL
    it was reached at (``None`` for a client given by the caller)."""

    client: Any
    """A ``redis.Redis`` or a ``redis.cluster.RedisCluster``."""
    namespace: str = DEFAULT_NAMESPACE
    prefix: str = DEFAULT_PREFIX
    url: str | None = None
    _nodes: list[redis.Redis] = field(default_factory=list, init=False, repr=False)
    """The primaries' clients handed out, closed with the target's."""

    def __post_init__(self) -> None:
        bytes_client(self.client)
        validate_scope(self.namespace, self.prefix)

    @classmethod
    def connect(
        cls,
        url: str | None = None,
        *,
        cluster: bool = False,
        namespace: str = DEFAULT_NAMESPACE,
        prefix: str = DEFAULT_PREFIX,
    ) -> Target:
        """A target on a new client for ``url`` (``REDIS_HISTORY_URL``'s when ``None``).

        Raises:
            ValueError: a URL redis-py cannot use (``UnsupportedClientError`` for one asking
                for ``decode_responses``), or an unusable namespace or prefix.
            StoreUnavailableError: a cluster none of whose nodes answers.
            AccessDeniedError: a cluster that refuses the credentials.
        """
        url = url or URL.read()
        options: dict[str, Any] = {"socket_connect_timeout": CONNECT_TIMEOUT}
        try:
            client: Any = (
                RedisCluster.from_url(url, **options)
                if cluster
                else redis.Redis.from_url(url, **options)
            )
        except RedisFailure as exc:  # a cluster client connects as it is made
            raise redis_error(exc, where=f"Redis at {redact_url(url)}") from exc
        try:
            return cls(client, namespace, prefix, url)
        except ValueError:  # the URL asked for decode_responses, or a name is unusable
            client.close()
            raise

    @property
    def cluster(self) -> bool:
        """Whether the store is a Redis Cluster."""
        return isinstance(self.client, RedisCluster)

    @property
    def shown(self) -> str:
        """The store's URL with its password masked (or the client's own description)."""
        return redact_url(self.url) if self.url else repr(self.client)

    def primaries(self) -> list[redis.Redis]:
        """A client of each primary: the store's own client when it is not a cluster."""
        if not self.cluster:
            return [self.client]
        nodes = [self.client.get_redis_connection(node) for node in self.client.get_primaries()]
        self._nodes += nodes
        return nodes

    def wrap(self, exc: Exception) -> HistoryError:
        """The typed error for a redis-py error met on the store itself, not on one
        conversation (a scan), naming the store and its password masked."""
        return redis_error(
            exc,
            Redactor.of(*url_secrets(self.url), *client_secrets(self.client)),
            where=f"Redis at {self.shown}",
        )

    def history(self, conversation_id: str) -> RedisHistory:
        """The history of ``conversation_id`` in the target's namespace."""
        return RedisHistory(
            self.client, conversation_id, namespace=self.namespace, prefix=self.prefix
        )

    def existing(self, conversation_id: str) -> RedisHistory:
        """The history of ``conversation_id``, which must hold data.

        Raises:
            ConversationNotFoundError: none of its data keys exists.
        """
        history = self.history(conversation_id)
        try:
            found = self.client.exists(*history.keys.data)
        except RedisFailure as exc:
            raise history.core.wrap(exc) from exc
        if not found:
            raise ConversationNotFoundError(
                "no such conversation", conversation_id=conversation_id, namespace=self.namespace
            )
        return history

    def close(self) -> None:
        """Close the client's connections, and those of the primaries' clients handed out
        (a cluster client that refreshed its layout no longer knows them)."""
        for node in self._nodes:
            node.close()
            node.connection_pool.disconnect()
        self.client.close()


def run_call(history: RedisHistory, call: Call[T]) -> T:
    """One of the store's calls for ``history`` that its public methods do not make (a
    range of entries, a script only the operator's commands run), errors typed."""
    return history.execute(call)
