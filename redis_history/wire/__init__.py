"""The Redis plumbing every feature shares: what a failed call means (:mod:`.failures`)."""

from __future__ import annotations

from redis_history.wire.failures import (
    FAILURES,
    MOVED_ON,
    RedisFailure,
    ScriptsNotLoaded,
    access_denied,
    bytes_client,
    no_function,
    redis_error,
    resent,
    scripts_denied,
)

__all__ = [
    "FAILURES",
    "MOVED_ON",
    "RedisFailure",
    "ScriptsNotLoaded",
    "access_denied",
    "bytes_client",
    "no_function",
    "redis_error",
    "resent",
    "scripts_denied",
]
