"""The Lua scripts: loaded from package data with their includes expanded, and their result codes.

Each ``lua/<verb>-<NKEYS>.lua`` file is one atomic operation. A line
``--- @include "name"`` is replaced by ``lua/includes/<name>.lua``; includes may
include others, each is expanded once per script (the first time it is named),
and a cycle is an error. A script includes only what it uses, because every
call re-creates the helpers it carries.

Scripts run by their SHA1 (``EVALSHA``); a server that does not know one
(restarted, failed over, ``SCRIPT FLUSH``) is sent the source with ``EVAL``,
which also caches it there. Nothing is registered per client.

The same scripts make one Redis Functions library (:func:`library`, Redis 7 and
later), which an operator loads (``redis-history load-scripts``) for users that
may call the store's functions (``FCALL``) and run no Lua of their own: a
tenant's ACL rule. Its name and its functions' names carry a digest of every
script, so the libraries of two releases load side by side.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from enum import IntEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from redis_history.errors import (
    CorruptHistoryError,
    EmbedderMismatchError,
    HistoryError,
    InvalidTransitionError,
    LimitExceededError,
    LockLostError,
    RoleOrderError,
    StaleSnapshotError,
    ToolPairingError,
    UnindexedMemoryError,
)

__all__ = [
    "ERRORS",
    "Library",
    "Refusal",
    "Script",
    "expand_includes",
    "library",
    "refusal",
    "script",
    "script_names",
    "script_source",
]


class Refusal(IntEnum):
    """Why a script refused, the codes of ``lua/includes/codes.lua`` (a test keeps them equal)."""

    ROLE_ORDER = 1
    TOOL_PAIRING = 2
    STALE = 3
    LOCK_LOST = 4
    CORRUPT = 5
    INVALID_TRANSITION = 6
    LIMIT = 7
    MISMATCH = 8
    UNINDEXED = 9


ERRORS: dict[int, type[HistoryError]] = {
    Refusal.ROLE_ORDER: RoleOrderError,
    Refusal.TOOL_PAIRING: ToolPairingError,
    Refusal.STALE: StaleSnapshotError,
    Refusal.LOCK_LOST: LockLostError,
    Refusal.CORRUPT: CorruptHistoryError,
    Refusal.INVALID_TRANSITION: InvalidTransitionError,
    Refusal.LIMIT: LimitExceededError,
    Refusal.MISMATCH: EmbedderMismatchError,
    Refusal.UNINDEXED: UnindexedMemoryError,
}
"""Refusal codes mapped to the exceptions they raise.

A script replies with its result when it succeeds, and with ``{code, index,
reason}`` (the only array a write script returns) when it refuses, having
written nothing."""


def refusal(reply: Sequence[Any]) -> HistoryError:
    """The exception a script's refusal ``[code, index, reason]`` stands for (an unknown code
    is a plain ``HistoryError``)."""
    code = int(reply[0])
    error = ERRORS.get(code)
    if error is None:
        return HistoryError(f"unknown script result code {code}: {reply!r}")
    index, reason = int(reply[1]), reply[2]
    text = reason.decode() if isinstance(reason, bytes) else str(reason)
    return error(text, index=index if index >= 0 else None)


_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"\n?', re.MULTILINE)
_SOURCE_TREE = Path(__file__).resolve().parents[2] / "lua"


class Script(NamedTuple):
    """One operation's Lua source, its SHA1, how many keys it takes, and the name of the
    function that runs it in the store's functions :func:`library`."""

    name: str
    source: str
    sha: str
    nkeys: int
    function: str


class Library(NamedTuple):
    """The store's scripts as one Redis Functions library: ``FUNCTION LOAD`` takes ``code``."""

    name: str
    code: str


def _read(relative: str) -> str:
    if _has_package_data():
        return resources.files("redis_history.lua").joinpath(relative).read_text(encoding="utf-8")
    return (_SOURCE_TREE / relative).read_text(encoding="utf-8")


@cache
def _has_package_data() -> bool:
    try:
        return resources.files("redis_history.lua").joinpath("append-5.lua").is_file()
    except ModuleNotFoundError:
        return False


@cache
def _files() -> dict[str, str]:
    """Operation name to file name, e.g. ``append`` to ``append-5.lua``."""
    if _has_package_data():
        root = resources.files("redis_history.lua")
        names = [p.name for p in root.iterdir() if p.name.endswith(".lua")]
    else:
        names = [p.name for p in _SOURCE_TREE.glob("*.lua")]
    return {name.rsplit("-", 1)[0]: name for name in sorted(names)}


def script_names() -> tuple[str, ...]:
    """The operation names, e.g. ``append`` for ``append-5.lua``."""
    return tuple(_files())


def expand_includes(source: str, read: Callable[[str], str]) -> str:
    """``source`` with every include replaced by its expansion, each at most once.

    Args:
        source: Lua text with ``--- @include "name"`` lines.
        read: the text of an include by name.

    Raises:
        ValueError: an include names itself, directly or through others.
    """
    done: set[str] = set()

    def expand(text: str, stack: tuple[str, ...]) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in stack:
                raise ValueError(f"circular include: {' -> '.join((*stack, name))}")
            if name in done:
                return ""
            body = expand(read(name), (*stack, name))
            done.add(name)
            return body if body.endswith("\n") else body + "\n"

        return _INCLUDE.sub(one, text)

    return expand(source, ())


@cache
def script_source(name: str) -> str:
    """The full source of one script, includes expanded."""
    return expand_includes(_read(_files()[name]), lambda include: _read(f"includes/{include}.lua"))


@cache
def script(name: str) -> Script:
    """The script for operation ``name``."""
    source = script_source(name)
    nkeys = int(_files()[name].removesuffix(".lua").rsplit("-", 1)[1])
    sha = hashlib.sha1(source.encode()).hexdigest()
    return Script(name, source, sha, nkeys, f"{_library_name()}_{name}")


_READS = frozenset(
    {"EXISTS", "GET", "HEXISTS", "HGET", "HGETALL", "HLEN", "HMGET", "HSTRLEN", "LINDEX"}
    | {"LLEN", "LRANGE"}
    | {"PTTL", "SCARD", "SINTER", "SISMEMBER", "SMEMBERS", "TYPE", "ZCARD", "ZRANGE"}
    | {"ZREVRANGE", "ZSCORE", "VCARD", "VSIM", "VISMEMBER"}
)
"""Commands that write nothing: a script that calls only these is a ``no-writes`` function."""
_CALL = re.compile(r"redis\.p?call\(\s*(?:'([A-Z]+)'|\"([A-Z]+)\"|)")


def writes(source: str) -> bool:
    """Whether a script may write: it calls a command that writes, or one it names by a
    variable (``push_all``'s)."""
    return any(not (a or b) or (a or b) not in _READS for a, b in _CALL.findall(source))


@cache
def _library_name() -> str:
    """``redis_history_`` and a digest of every script, so each release's library and
    functions have names of their own."""
    digest = hashlib.sha1()
    for name in script_names():
        digest.update(f"{name}\0{script_source(name)}\0".encode())
    return f"redis_history_{digest.hexdigest()[:16]}"


@cache
def library() -> Library:
    """Every script as a function of one library, ``FCALL <function> <nkeys> keys... args...``
    running exactly what ``EVALSHA`` runs: each script's body becomes a callback whose
    parameters are named ``KEYS`` and ``ARGV``. A script that writes nothing is flagged
    ``no-writes`` (so it also runs on a replica, and while Redis is out of memory, as its
    ``EVAL`` does)."""
    name = _library_name()
    parts = [f"#!lua name={name}\n"]
    for operation in script_names():
        flags = "" if writes(script_source(operation)) else ", flags = {'no-writes'}"
        parts.append(
            f"redis.register_function{{function_name = '{name}_{operation}'{flags},\n"
            f"callback = function(KEYS, ARGV)\n{script_source(operation)}end}}\n"
        )
    return Library(name, "".join(parts))
