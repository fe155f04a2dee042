"""A tenant's Redis ACL rule: ``redis-history acl``.

The rule confines a user to one namespace: its keys (``~rh:<namespace>:*``: conversations
and memories), its compaction queue and its own jobs on the queue's Redis
(``~rq:queue:<queue>:<namespace>``, ``~rq:job:rhc-<tag>-*``, see
:func:`~redis_history.store.keys.job_tag`), and exactly the commands the store runs there,
named one by one: no command category, since each holds commands that reach further
(``@read`` holds ``SORT``, whose ``GET`` reads other keys on Redis 6.2; ``@connection``
holds ``CLIENT TRACKING``, which pushes every key name any client changes). Lua runs only
as the store's functions (``FCALL``), loaded by an operator (``redis-history
load-scripts``): no ``EVAL``, ``SCRIPT`` or ``FUNCTION`` of the tenant's own, so a tenant
cannot stall the server with a script. Redis 6.2 has no functions: there the rule grants
``EVALSHA`` alone, which runs only what is in the script cache (the store's scripts, loaded
by the operator again after each restart). No ``SCAN``, ``KEYS``, ``RANDOMKEY``, ``INFO``,
``MONITOR``, ``CLIENT LIST`` or anything else that shows other tenants' key names, data or
clients; no channels. On a cluster, the commands a cluster client learns the layout with
(``CLUSTER SLOTS``, ``SHARDS``, ``NODES``, ``COMMAND``, ``READONLY``, ``ASKING``).

The password is given as its SHA-256 (``#<hex>``), so the printed rule can be kept in an
ACL file or a deployment's configuration without the password in clear.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from redis_history.store.keys import (
    DEFAULT_PREFIX,
    JOB_ID_DIGITS,
    RQ_JOB_PREFIX,
    RQ_QUEUE_PREFIX,
    glob_escape,
    job_id_prefix,
    namespace_pattern,
    tenant_queue,
)

__all__ = [
    "CLUSTER_COMMANDS",
    "CONNECTION_COMMANDS",
    "DATA_COMMANDS",
    "DEFAULT_REDIS_VERSION",
    "VECTOR_COMMANDS",
    "setuser_command",
    "tenant_commands",
    "tenant_rule",
]

CONNECTION_COMMANDS = (
    "hello",
    "auth",
    "ping",
    "echo",
    "select",
    "reset",
    "client|setname",
    "client|getname",
    "client|id",
)
"""What a client runs to connect (redis-py's handshake, its health checks)."""
CLUSTER_COMMANDS = (
    "cluster|slots",
    "cluster|shards",
    "cluster|nodes",
    "cluster|info",
    "cluster|myid",
    "command",
    "readonly",
    "readwrite",
    "asking",
)
"""What a cluster client learns the layout and follows redirections with (no
``CLUSTER GETKEYSINSLOT``, which lists key names)."""
DATA_COMMANDS = (
    "exists",
    "type",
    "get",
    "set",
    "del",
    "unlink",
    "rename",
    "pexpire",
    "persist",
    "pttl",
    "lrange",
    "llen",
    "lindex",
    "lpush",
    "rpush",
    "rpushx",
    "lpop",
    "ltrim",
    "hget",
    "hmget",
    "hgetall",
    "hscan",
    "hexists",
    "hlen",
    "hstrlen",
    "hset",
    "hsetnx",
    "hdel",
    "hincrby",
    "sadd",
    "srem",
    "sinter",
    "zadd",
    "zrem",
    "zscore",
    "zcard",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zrevrange",
    "zinter",
    "multi",
    "exec",
    "discard",
    "wait",
)
"""What the store runs on a namespace's keys, itself and inside its scripts (a test checks
every script's commands are here), and what a pod runs to enqueue a compaction on its queue
(``HSET`` of its job, ``RPUSH`` of the job's id, in a ``MULTI``)."""
VECTOR_COMMANDS = ("vadd", "vrem", "vsim", "vcard", "vismember")
"""What long-term memory runs on a server with vector sets (Redis 8 and later), inside its
scripts: each memory's vector, kept, dropped and searched (``lua/memory_*.lua``)."""
DEFAULT_REDIS_VERSION = (7, 0)
"""The oldest server the rule is written for unless told otherwise."""

_USER = re.compile(r"^[^\s\x00-\x1f\x7f]+$")


def tenant_commands(redis_version: tuple[int, int] = DEFAULT_REDIS_VERSION) -> list[str]:
    """The command rules of a tenant's user on Redis ``redis_version`` and later, in order:
    nothing, then each command the store runs.

    Redis 7.0 and later: the store's functions (``FCALL``, ``FCALL_RO``); 7.2 and later also
    redis-py's ``CLIENT SETINFO`` (an unknown command to 7.0, which refuses a rule naming
    it; redis-py ignores the refusal); 8.0 and later also the vector set commands long-term
    memory keeps its vectors with (:data:`VECTOR_COMMANDS`). Redis 6.2: ``EVALSHA`` of the
    loaded scripts.
    """
    scripting = ("fcall", "fcall_ro") if redis_version >= (7, 0) else ("evalsha",)
    setinfo = ("client|setinfo",) if redis_version >= (7, 2) else ()
    vectors = VECTOR_COMMANDS if redis_version >= (8, 0) else ()
    every = (
        *CONNECTION_COMMANDS,
        *setinfo,
        *CLUSTER_COMMANDS,
        *DATA_COMMANDS,
        *vectors,
        *scripting,
    )
    return ["-@all", *(f"+{command}" for command in every)]


def tenant_rule(
    namespace: str,
    *,
    user: str,
    password: str,
    prefix: str = DEFAULT_PREFIX,
    queue: str = "redis-history",
    redis_version: tuple[int, int] = DEFAULT_REDIS_VERSION,
) -> list[str]:
    """The arguments of ``ACL SETUSER`` that make ``user`` a tenant of ``namespace``: its
    keys in the store, and its compaction queue ``<queue>:<namespace>`` and jobs on the
    queue's Redis (apply the rule on both, when they are two servers).

    ``reset`` first, so that applying the rule to an existing user replaces what it had.

    Raises:
        ValueError: a namespace or prefix that would widen the key pattern (``*``, ``?``,
            ``[``, ``]``, ``\\``) or is not a usable name (a ``:``, a space, a brace, a
            control character); an empty queue name or one with a space; an empty password;
            a user name with spaces or control characters; a version before 6.2.
    """
    pattern = namespace_pattern(namespace, prefix)
    if not queue or not _USER.match(queue):
        raise ValueError(f"a queue name is not empty and has no spaces: {queue!r}")
    if not _USER.match(user):
        raise ValueError(f"an ACL user name has no spaces or control characters: {user!r}")
    if not password:
        raise ValueError("the tenant's password is empty")
    if redis_version < (6, 2):
        raise ValueError(f"the store runs on Redis 6.2 and later, not {redis_version}")
    digest = hashlib.sha256(password.encode("utf-8", "surrogatepass")).hexdigest()
    keys = (
        f"~{pattern}",
        f"~{RQ_QUEUE_PREFIX}{glob_escape(tenant_queue(queue, namespace))}",
        f"~{RQ_JOB_PREFIX}{job_id_prefix(namespace, prefix)}{'?' * JOB_ID_DIGITS}",
    )
    commands = tenant_commands(redis_version)
    return [user, "reset", "on", f"#{digest}", *keys, "resetchannels", *commands]


def setuser_command(rule: list[str]) -> str:
    """``ACL SETUSER`` with ``rule``, one line as ``redis-cli`` takes it."""
    return " ".join(["ACL", "SETUSER", *map(shlex.quote, rule)])
