"""The store's own round trips: connections borrowed once from the client's pool.

redis-py's ``execute_command`` takes a connection from the pool and gives it
back for every command, with a lock, pool and operation metrics and event
dispatch each time; on a loopback round trip of about 100 µs that measured
about a third of it (``docs/benchmarks.md``). The store's commands go instead
on connections it borrows from the same pool once and keeps idle in a *lane*
for its next command. Before each use a lane connection gets the check the
pool makes (``can_read``: a connection the server closed while it sat idle, or
one with anything waiting on it, is reconnected first), each command runs under
the connection's own ``Retry`` and disconnects on failure, as
``execute_command`` does, and an interruption (a timeout, ``KeyboardInterrupt``)
disconnects it, so a reply is never read as another command's. Refused
credentials (redis-py's ``AuthenticationError``, a ``ConnectionError`` to the
``Retry``) are not sent again: a wrong password stays wrong. (Connecting, redis-py
itself makes as many attempts at the handshake as the ``Retry`` allows.)

The lane is used only where that is all ``execute_command`` would do: a
``redis.Redis`` whose ``execute_command`` is redis-py's own, with no pinned
connection (``single_connection_client``), on a pool whose ``get_connection`` is
redis-py's own (not a ``BlockingConnectionPool``, whose fixed size a lane could
starve) and with no client-side cache. Anything
else (a cluster client, another client class) gets ``execute_command``. The
lane keeps at most as many connections as the store ran commands at once, and
never more than a quarter of the pool's ``max_connections`` (more go back to the
pool); a forked child starts its own. redis-py's operation metrics
(OpenTelemetry) do not see these commands.

A write that waits for its replicas on a cluster goes straight to its slot's
primary (:func:`anode_pipeline`, :func:`refresh_layout`). This is the one module
that relies on redis-py below its public API: docs/internals.md lists what, and
tests/test_dependency_internals.py checks each shape on the installed redis-py.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
from redis.asyncio.cluster import PipelineCommand
from redis.exceptions import (
    AuthenticationError,
    ConnectionError,
    NoPermissionError,
    NoScriptError,
    ResponseError,
    TimeoutError,
)
from redis.utils import HIREDIS_AVAILABLE

from redis_history.wire.failures import (
    MOVED_ON,
    ScriptsNotLoaded,
    access_denied,
    no_function,
    scripts_denied,
)

if HIREDIS_AVAILABLE:
    from hiredis import pack_command

if TYPE_CHECKING:
    from redis_history.wire.call import Call

__all__ = [
    "UNSTAGED",
    "WAIT_ATTEMPTS",
    "aexecute",
    "aexecute_all",
    "again",
    "anode_pipeline",
    "apipelined",
    "arefresh_layout",
    "asend",
    "command_of",
    "execute",
    "execute_all",
    "functions_only",
    "lane_of",
    "pipelined",
    "refresh_layout",
    "send",
    "staged_reply",
]

WAIT_ATTEMPTS = 4
"""How many times a waited-on write is sent to a cluster whose layout keeps changing."""

UNSTAGED = object()
"""A staged transaction wrote nothing and the write is to be sent as its script."""


def staged_reply(replies: list[Any]) -> Any:
    """The script's reply in a staged transaction's replies (``MULTI``'s, one per queued
    command, ``EXEC``'s), or ``UNSTAGED`` when the transaction wrote nothing and the
    script alone must do the write: ``EXEC`` aborted (a command refused when queued, such
    as an ACL without ``RENAME``), the script is not loaded (``NOSCRIPT``), or the list
    was empty (nothing to rename; the script replies -1). Its error replies are raised, and
    so is an ACL's refusal of the queued script (``replies[1]``), which the script alone
    would meet again."""
    if access_denied(replies[1]):  # the script's own command: sent alone, it is denied too
        raise replies[1]
    executed = replies[-1]
    if not isinstance(executed, list):
        return UNSTAGED
    reply = executed[0]
    if isinstance(reply, NoScriptError) or reply == -1:
        return UNSTAGED
    if isinstance(reply, ResponseError):
        raise reply
    return reply


_ATTRIBUTE = "_redis_history_lane"
"""Where a pool keeps its lane: on the pool itself, so the lane lives and dies with it
(a connection refers to its pool, so a lane kept anywhere else would keep the pool)."""
_LANED: weakref.WeakSet[Any] = weakref.WeakSet()
"""The pools that have a lane, for a forked child to drop."""


class _Making:
    """The lock under which a pool's lane is made, once."""

    lock = threading.Lock()

    @classmethod
    def forget(cls) -> None:
        """In a forked child: no lane of the parent's (its sockets are the parent's), and a
        fresh lock (another thread may have held it at the fork)."""
        for pool in list(_LANED):
            vars(pool).pop(_ATTRIBUTE, None)
        _LANED.clear()
        cls.lock = threading.Lock()


os.register_at_fork(after_in_child=_Making.forget)


def lane_of(pool: Any) -> _Lane | None:
    """``pool``'s lane, if it has one."""
    lane: _Lane | None = vars(pool).get(_ATTRIBUTE)
    return lane


class _Lane:
    """Idle connections borrowed from one pool, in this process."""

    __slots__ = ("hiredis", "idle", "pushes", "room")

    def __init__(self, pool: Any, asyncio: bool) -> None:
        self.idle: list[Any] = []
        self.room = pool.max_connections // 4
        """The most connections the lane keeps: a quarter of the pool's, so that what it
        keeps never starves the pool's other users; more go back to the pool."""
        notified = getattr(pool, "maint_notifications_enabled", None)
        self.pushes = bool(notified and notified())
        """Whether the server may push notices to an idle connection (RESP3 maintenance
        notifications), which the next read handles: then only a closed one is replaced."""
        options = pool.connection_kwargs
        self.hiredis = (
            HIREDIS_AVAILABLE
            and options.get("command_packer") is None
            and (not asyncio or _utf8(options))
        )
        """Whether commands may be packed by hiredis directly: what a sync connection's
        packer does (after a check of each argument the store never needs), and what an
        asyncio one's Python packer does when it encodes text as strict UTF-8."""

    def keeps(self, conn: Any) -> bool:
        """Keep ``conn`` idle for the next command, if there is room."""
        if len(self.idle) < self.room:
            self.idle.append(conn)
            return True
        return False

    def pack(self, args: tuple[Any, ...]) -> Any:
        """A function of a connection giving the command packed as it would pack it."""
        if self.hiredis:
            packed = [pack_command(args)]
            return lambda _conn: packed
        return lambda conn: conn.pack_command(*args)

    def pack_all(self, commands: tuple[tuple[Any, ...], ...]) -> Any:
        """:meth:`pack` of several commands sent together."""
        if self.hiredis:
            packed = [b"".join([pack_command(args) for args in commands])]
            return lambda _conn: packed
        return lambda conn: conn.pack_commands(commands)


def _utf8(options: dict[str, Any]) -> bool:
    encoding = str(options.get("encoding", "utf-8")).lower().replace("_", "-")
    return encoding in ("utf-8", "utf8") and options.get("encoding_errors", "strict") == "strict"


def _lane(client: Any, own: type[Any], pool_class: type[Any]) -> _Lane | None:
    """The lane for ``client``'s pool, or ``None`` where ``execute_command`` must be used."""
    if type(client).execute_command is not own.execute_command or client.connection is not None:
        return None
    pool = client.connection_pool
    if (
        type(pool).get_connection is not pool_class.get_connection
        or getattr(pool, "cache", None) is not None
    ):
        return None
    lane = lane_of(pool)
    if lane is None:
        with _Making.lock:  # two threads' first commands must not make two lanes
            lane = lane_of(pool)
            if lane is None:
                lane = _Lane(pool, asyncio=own is not redis.Redis)
                setattr(pool, _ATTRIBUTE, lane)
                _LANED.add(pool)
    return lane if lane.room else None


def execute(client: Any, args: tuple[Any, ...]) -> Any:
    """``client.execute_command(*args)`` without a response callback, on the lane if it
    has one: the raw reply, or the error reply raised as redis-py raises it."""
    lane = _lane(client, redis.Redis, redis.ConnectionPool)
    if lane is None:
        return client.execute_command(*args)
    return _round_trip(client, lane, lane.pack(args), _read_one)


def execute_all(client: Any, commands: tuple[tuple[Any, ...], ...]) -> list[Any] | None:
    """Send ``commands`` together on one lane connection (a ``MULTI`` ... ``EXEC``) and
    read a reply to each, an error reply as the exception redis-py makes of it; or
    ``None`` when ``client`` has no lane (only a lane holds one connection for them)."""
    lane = _lane(client, redis.Redis, redis.ConnectionPool)
    if lane is None:
        return None
    replies: list[Any] = _round_trip(client, lane, lane.pack_all(commands), _reader(len(commands)))
    return replies


def _read_one(conn: Any) -> Any:
    return conn.read_response()


def _reader(count: int) -> Any:
    def read_all(conn: Any) -> list[Any]:
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(conn.read_response())
            except ResponseError as error:  # read whole; the next reply follows
                replies.append(error)
        return replies

    return read_all


def _settled(reply: Any, denied: list[AuthenticationError]) -> Any:
    """``reply``, or the refusal of the credentials a round trip kept from the ``Retry``."""
    if denied:
        raise denied[0]
    return reply


def _round_trip(client: Any, lane: _Lane, packed: Any, read: Any) -> Any:
    """Send ``packed`` (built by ``lane``) on a lane connection and ``read`` its reply."""
    try:
        conn = lane.idle.pop()
    except IndexError:
        conn = client.connection_pool.get_connection()
    else:
        try:  # what the pool checks: closed while idle, or anything but a push waiting
            if conn.can_read(0) and not lane.pushes:
                conn.disconnect()
        except (ConnectionError, TimeoutError, OSError):
            conn.disconnect()

    denied: list[AuthenticationError] = []

    def round_trip() -> Any:
        try:
            conn.send_packed_command(packed(conn))
            return read(conn)
        except AuthenticationError as error:  # kept from the Retry, which would resend it
            denied.append(error)
            return None

    try:
        return _settled(
            conn.retry.call_with_retry(round_trip, lambda _error: conn.disconnect()), denied
        )
    except ResponseError:
        raise  # an error reply, read whole
    except BaseException:
        conn.disconnect()  # a reply may still be on its way: never read as the next one's
        raise
    finally:
        if not lane.keeps(conn):
            client.connection_pool.release(conn)


async def aexecute(client: Any, args: tuple[Any, ...]) -> Any:
    """:func:`execute` on an asyncio client."""
    lane = _lane(client, redis.asyncio.Redis, redis.asyncio.ConnectionPool)
    if lane is None:
        return await client.execute_command(*args)
    return await _around_trip(client, lane, lane.pack(args), _aread_one)


async def aexecute_all(client: Any, commands: tuple[tuple[Any, ...], ...]) -> list[Any] | None:
    """:func:`execute_all` on an asyncio client."""
    lane = _lane(client, redis.asyncio.Redis, redis.asyncio.ConnectionPool)
    if lane is None:
        return None
    replies: list[Any] = await _around_trip(
        client, lane, lane.pack_all(commands), _areader(len(commands))
    )
    return replies


async def _aread_one(conn: Any) -> Any:
    return await conn.read_response()


def _areader(count: int) -> Any:
    async def read_all(conn: Any) -> list[Any]:
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(await conn.read_response())
            except ResponseError as error:
                replies.append(error)
        return replies

    return read_all


async def _around_trip(client: Any, lane: _Lane, packed: Any, read: Any) -> Any:
    """:func:`_round_trip` on an asyncio client."""
    pool = client.connection_pool
    try:
        conn = lane.idle.pop()
    except IndexError:
        conn = await pool.get_connection()
    else:
        check = getattr(conn, "can_read", None) or conn.can_read_destructive  # redis-py < 8
        try:
            if await check() and not lane.pushes:
                await conn.disconnect()
        except (ConnectionError, TimeoutError, OSError):
            await conn.disconnect()

    denied: list[AuthenticationError] = []

    async def round_trip() -> Any:
        try:
            await conn.send_packed_command(packed(conn))
            return await read(conn)
        except AuthenticationError as error:
            denied.append(error)
            return None

    try:
        return _settled(
            await conn.retry.call_with_retry(round_trip, lambda _error: conn.disconnect()), denied
        )
    except ResponseError:
        raise
    except BaseException:
        await conn.disconnect(nowait=True)  # cancelled: the reply may still be on its way
        raise
    finally:
        if not lane.keeps(conn):
            await pool.release(conn)


_FUNCTIONS = "_redis_history_functions"
"""Set on a client whose user may not run Lua of its own (``EVALSHA`` denied, a tenant's
rule): the store's calls on it run the functions of the store's library (``FCALL``)."""


def functions_only(client: Any) -> bool:
    """Whether ``client``'s calls run the store's functions rather than its scripts."""
    return bool(getattr(client, _FUNCTIONS, False))


def command_of(client: Any, call: Call[Any]) -> tuple[Any, ...]:
    """The command that runs ``call`` on ``client``: its ``FCALL`` where the user runs only the
    store's functions, else its ``EVALSHA``."""
    return call.function() if call.script is not None and functions_only(client) else call.command


def again(
    client: Any, call: Call[Any], sent: tuple[Any, ...], error: BaseException
) -> tuple[Any, ...] | None:
    """The command to send for ``call`` after ``sent`` met ``error``, or ``None`` (raise it):
    the script's source for an ``EVALSHA`` the server did not know; the function for one the
    ACL denied (from then on, for every call on ``client``).

    Raises:
        ScriptsNotLoaded: the server has not the store's function, or denied the script's
            source to a user that may only run what is loaded.
    """
    if call.script is None:
        return None
    if no_function(error) or (sent[0] == "EVAL" and isinstance(error, NoPermissionError)):
        raise ScriptsNotLoaded(str(error)) from error
    if sent[0] != "EVALSHA":
        return None
    if isinstance(error, NoScriptError):
        return call.fallback()
    if scripts_denied(error):
        setattr(client, _FUNCTIONS, True)
        return call.function()
    return None


def send(client: Any, call: Call[Any]) -> Any:
    """The reply to the core's ``call``; a server that does not know its script (restarted,
    failed over, ``SCRIPT FLUSH``) is sent the source by ``EVAL``, and a user that may only
    run the store's functions its ``FCALL``. A staged call is sent as its transaction where
    the client allows, and as its script where that wrote nothing."""
    if call.batch:
        return pipelined(client, call.command)
    command, staged = command_of(client, call), call.staged
    while True:
        try:
            if staged is not None:
                replies = execute_all(client, _staged(call, command))
                if replies is not None and (reply := staged_reply(replies)) is not UNSTAGED:
                    return reply
            if command[0] == "FCALL" and isinstance(client, redis.RedisCluster):
                return _on_slot(client, command)
            return execute(client, command)
        except ResponseError as error:
            retry = again(client, call, command, error)
            if retry is None:
                raise
            command, staged = retry, call.staged if retry[0] == "FCALL" else None


def pipelined(
    client: Any, commands: Sequence[tuple[Any, ...]], *, raise_on_error: bool = True
) -> list[Any]:
    """The replies to ``commands`` sent together (a pipeline, not a transaction), on the
    lane where the client has one; the first error reply is raised, or (``raise_on_error``
    false) stands in the list as an exception, as redis-py's pipelines give it."""
    replies = execute_all(client, tuple(commands))
    if replies is None:
        with client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            replies = pipe.execute(raise_on_error=False)
    return _unfailed(replies) if raise_on_error else replies


async def apipelined(
    client: Any, commands: Sequence[tuple[Any, ...]], *, raise_on_error: bool = True
) -> list[Any]:
    """:func:`pipelined` on an asyncio client."""
    replies = await aexecute_all(client, tuple(commands))
    if replies is None:
        async with client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            replies = await pipe.execute(raise_on_error=False)
    return _unfailed(replies) if raise_on_error else replies


def _unfailed(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _staged(call: Call[Any], command: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...]:
    """``call``'s staged transaction around ``command``'s script or function."""
    return call.staged_function() if command[0] == "FCALL" else call.staged  # type: ignore[return-value]


def _on_slot(cluster: Any, command: tuple[Any, ...]) -> Any:
    """``command`` sent to the primary of its first key's slot. redis-py finds an ``FCALL``'s
    keys by asking the server (``COMMAND GETKEYS`` with every argument) before each one; the
    store knows them."""
    for attempt in range(WAIT_ATTEMPTS):
        try:
            return cluster.execute_command(
                *command, target_nodes=cluster.get_node_from_key(command[3])
            )
        except MOVED_ON:
            if attempt == WAIT_ATTEMPTS - 1:
                raise
        time.sleep(0.1 * 2**attempt)  # a failover or a slot migration: read the layout again
        refresh_layout(cluster)
    raise AssertionError("unreachable")


async def asend(client: Any, call: Call[Any]) -> Any:
    """:func:`send` on an asyncio client."""
    if call.batch:
        return await apipelined(client, call.command)
    command, staged = command_of(client, call), call.staged
    while True:
        try:
            if staged is not None:
                replies = await aexecute_all(client, _staged(call, command))
                if replies is not None and (reply := staged_reply(replies)) is not UNSTAGED:
                    return reply
            if command[0] == "FCALL" and isinstance(client, redis.asyncio.RedisCluster):
                return await _aon_slot(client, command)
            return await aexecute(client, command)
        except ResponseError as error:
            retry = again(client, call, command, error)
            if retry is None:
                raise
            command, staged = retry, call.staged if retry[0] == "FCALL" else None


async def _aon_slot(cluster: Any, command: tuple[Any, ...]) -> Any:
    """:func:`_on_slot` on an asyncio cluster client."""
    for attempt in range(WAIT_ATTEMPTS):
        try:
            return await cluster.execute_command(
                *command, target_nodes=cluster.get_node_from_key(command[3])
            )
        except MOVED_ON:
            if attempt == WAIT_ATTEMPTS - 1:
                raise
        await asyncio.sleep(0.1 * 2**attempt)
        await arefresh_layout(cluster)
    raise AssertionError("unreachable")


# -- a cluster's slot primary, reached directly ----------------------------------------------


def refresh_layout(cluster: Any) -> None:
    """Read ``cluster``'s slot layout again, after a write sent straight to a slot's primary
    met a moved slot or a failed node (redis-py has no public call for it: its own commands
    refresh the layout only when they are redirected themselves)."""
    cluster.nodes_manager.initialize()


async def arefresh_layout(cluster: Any) -> None:
    """:func:`refresh_layout` of an asyncio cluster client."""
    await cluster.nodes_manager.initialize()


async def anode_pipeline(node: Any, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
    """The replies to ``commands``, sent together on one connection of an asyncio cluster's
    ``node``, an error reply as its exception (the sync client's public
    ``get_redis_connection(node).pipeline()`` has no asyncio counterpart)."""
    pending = [PipelineCommand(position, *command) for position, command in enumerate(commands)]
    await node.execute_pipeline(pending)
    return [command.result for command in pending]
