"""The store's scripts as one Redis Functions library: what a tenant's rule lets it run.

Each script is a function of the library, running exactly the script's body; a client whose
user may not run ``EVALSHA`` sends ``FCALL`` instead (the contract suite runs whole that way:
the ``-functions`` backends of ``tests/backends.py``), and on a cluster sends it to the slot's
primary itself; every command a script runs is one the tenant's rule grants.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from backends import functions_only
from redis.cluster import RedisCluster
from samples import STAGED_TEXT

from redis_history import AsyncRedisHistory, Message, RedisHistory, ToolCall
from redis_history.admin.acl import VECTOR_COMMANDS, tenant_commands
from redis_history.demo.server import RedisServer
from redis_history.wire import lane as _lane
from redis_history.wire.scripts import library, script, script_names, script_source, writes

pytestmark = pytest.mark.real_redis

_LITERAL = re.compile(r"'([A-Z_]+)'|\"([A-Z_]+)\"")


def test_every_script_is_one_function_of_the_library() -> None:
    """One ``register_function`` a script, named after the library (whose name carries a digest
    of every script) and the script; a script that writes nothing is flagged ``no-writes``."""
    lib = library()
    assert lib.code.startswith(f"#!lua name={lib.name}\n")
    assert re.fullmatch(r"redis_history_[0-9a-f]{16}", lib.name)
    registered = re.findall(r"function_name = '([a-z0-9_]+)'", lib.code)
    assert registered == [script(name).function for name in script_names()]
    assert all(name.startswith(f"{lib.name}_") for name in registered)
    read_only = set(
        re.findall(r"function_name = '([a-z0-9_]+)', flags = \{'no-writes'\}", lib.code)
    )
    assert read_only == {script(n).function for n in script_names() if not writes(script_source(n))}
    assert {"estimate", "transcript"} <= {n for n in script_names() if not writes(script_source(n))}
    assert writes("redis.call('GET', k) redis.call(command, k)")  # a command named by a variable


@pytest.mark.parametrize("major", [7, 8])
def test_every_command_a_script_runs_is_one_the_rule_grants(
    major: int, redis_server: RedisServer, vector_server: RedisServer
) -> None:
    """Every Redis command a script names (in ``redis.call`` or handed to a helper that calls
    it) and the server knows is among the tenant rule's commands for that server (Redis 8's
    with the vector set commands); Redis checks the ACL inside a function too."""
    client = (redis_server if major == 7 else vector_server).client()
    commands = {str(c, "utf-8") if isinstance(c, bytes) else c for c in client.command_list()}
    commands = {c.upper() for c in commands}
    rule = tenant_commands((major, 0))
    granted = {c.removeprefix("+").upper() for c in rule if c.startswith("+")}
    for name in script_names():
        named = {a or b for a, b in _LITERAL.findall(script_source(name))} & commands
        assert named <= granted, (name, named - granted)
    if major == 8:
        assert {c.upper() for c in VECTOR_COMMANDS} <= commands & granted


def _turn(history: Any, turn: int) -> list[Message]:
    call = ToolCall(id=f"call-{turn}", name="search", arguments={"q": turn})
    return [
        Message.user(f"question {turn}"),
        Message.assistant("", tool_calls=[call]),
        Message.tool(STAGED_TEXT, tool_call_id=call.id),  # a staged append: MULTI ... EXEC
        Message.assistant("answer"),
    ]


def _commandstats(client: redis.Redis) -> dict[str, int]:
    return {name: int(stats["calls"]) for name, stats in client.info("commandstats").items()}


def test_a_functions_only_client_runs_no_script(redis_server: RedisServer) -> None:
    """Sync and asyncio, plain and staged appends, reads, rewrites: every call of a client
    whose calls run as functions is an FCALL (or FCALL_RO-free FCALL of a no-writes
    function), never an EVAL or EVALSHA."""
    admin = redis_server.client()
    admin.flushall()
    sync = redis_server.client()
    functions_only(sync, admin)
    admin.config_resetstat()
    history = RedisHistory(sync, "c", namespace="t")
    history.append(Message.system("sys"))
    for turn in range(3):
        history.append_many(_turn(history, turn))
    history.rollback(history.snapshot()[-4:])
    assert history.token_estimate()
    assert history.transcript()

    async def asynchronous() -> None:
        client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
        setattr(client, _lane._FUNCTIONS, True)  # loaded above
        ahistory = AsyncRedisHistory(client, "c", namespace="t")
        await ahistory.append_many(_turn(ahistory, 9))
        assert await ahistory.token_estimate()
        await client.aclose()

    asyncio.run(asynchronous())
    calls = _commandstats(admin)
    assert calls.get("cmdstat_fcall", 0) >= 9
    assert not {"cmdstat_eval", "cmdstat_evalsha", "cmdstat_script|load"} & set(calls)
    sync.close()
    admin.close()


def test_on_a_cluster_the_store_routes_its_functions_itself(
    cluster_client: RedisCluster,
) -> None:
    """redis-py finds an FCALL's keys by asking a node (``COMMAND GETKEYS`` with every
    argument, envelopes and all) before each call; the store knows the keys and sends each
    FCALL to its slot's primary: no node is asked."""
    functions_only(cluster_client, cluster_client)
    primaries = cluster_client.get_primaries()  # type: ignore[no-untyped-call]
    nodes = [cluster_client.get_redis_connection(n) for n in primaries]
    for node in nodes:
        node.config_resetstat()
    for conversation in ("a", "b", "c", "d"):
        history = RedisHistory(cluster_client, conversation, namespace="t")
        history.append_many(_turn(history, 0))
        assert len(history.snapshot()) == 4
    asked: Callable[[redis.Redis], int] = lambda n: _commandstats(n).get(  # noqa: E731
        "cmdstat_command|getkeys", 0
    )
    assert sum(_commandstats(n).get("cmdstat_fcall", 0) for n in nodes) >= 4
    assert [asked(n) for n in nodes] == [0] * len(nodes)
