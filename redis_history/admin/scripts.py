"""Load the store's scripts where users may not load them: ``redis-history load-scripts``.

A tenant's ACL rule (``redis-history acl``) lets its user run the store's functions and no
Lua of its own, so the functions must be on the server before a tenant's first call: on
Redis 7 and later the store's library, which Redis keeps in its data (replicated, saved,
restored after a restart or a failover); on Redis 6.2, which has no functions, each script
in the script cache, which a restart empties (load them again after one). Loading is
idempotent: each release's library has a name of its own, so an operator loads the new
one before rolling out pods of a new release, and both run side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import exceptions as redis_errors

from redis_history.admin.target import Target
from redis_history.wire import RedisFailure, redis_error
from redis_history.wire.scripts import library, script, script_names

__all__ = ["Loaded", "load_scripts", "server_major"]


@dataclass(frozen=True, slots=True)
class Loaded:
    """What one primary holds once loaded."""

    node: str
    """The primary, as ``host:port``."""
    library: str | None
    """The store's functions library, or ``None`` on a server without functions (6.2)."""
    scripts: int
    """How many scripts are in its script cache."""


def server_major(node: object) -> int:
    """The major version of the Redis ``node`` (a ``redis.Redis``) runs."""
    version = str(node.info("server")["redis_version"])  # type: ignore[attr-defined]
    return int(version.split(".", maxsplit=1)[0])


def load_scripts(target: Target) -> list[Loaded]:
    """Load the store's functions library (Redis 7+) and every script into the script cache,
    on each primary of ``target``.

    Raises:
        AccessDeniedError: the user may not load functions or scripts (an operator's step).
        StoreUnavailableError: a primary could not be reached.
    """
    lib = library()
    loaded: list[Loaded] = []
    for node in target.primaries():
        kwargs = node.connection_pool.connection_kwargs
        where = f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
        try:
            has_functions = server_major(node) >= 7
            if has_functions:
                try:
                    node.execute_command("FUNCTION", "LOAD", lib.code)  # type: ignore[no-untyped-call]
                except redis_errors.ResponseError as exc:
                    if "already exists" not in str(exc):
                        raise
            for name in script_names():
                node.script_load(script(name).source)
        except RedisFailure as exc:
            raise redis_error(exc, where=f"Redis at {where}") from exc
        loaded.append(Loaded(where, lib.name if has_functions else None, len(script_names())))
    return loaded
