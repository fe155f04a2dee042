"""The Lua scripts: loaded from package data with their includes expanded, and their result codes.

Each ``lua/<verb>-<NKEYS>.lua`` file is one atomic operation. A line
``--- @include "name"`` is replaced by ``lua/includes/<name>.lua``; includes may
include others, each is expanded once per script (the first time it is named),
and a cycle is an error. A script includes only what it uses, because every
call re-creates the helpers it carries.

Scripts run by their SHA1 (``EVALSHA``); a server that does not know one
(restarted, failed over, ``SCRIPT FLUSH``) is sent the source with ``EVAL``,
which also caches it there. Nothing is registered per client.
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
    HistoryError,
    InvalidTransitionError,
    LimitExceededError,
    LockLostError,
    RoleOrderError,
    StaleSnapshotError,
    ToolPairingError,
)

__all__ = [
    "ERRORS",
    "Refusal",
    "Script",
    "expand_includes",
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


ERRORS: dict[int, type[HistoryError]] = {
    Refusal.ROLE_ORDER: RoleOrderError,
    Refusal.TOOL_PAIRING: ToolPairingError,
    Refusal.STALE: StaleSnapshotError,
    Refusal.LOCK_LOST: LockLostError,
    Refusal.CORRUPT: CorruptHistoryError,
    Refusal.INVALID_TRANSITION: InvalidTransitionError,
    Refusal.LIMIT: LimitExceededError,
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
    """One operation's Lua source, its SHA1 and how many keys it takes."""

    name: str
    source: str
    sha: str
    nkeys: int


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
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest(), nkeys)
