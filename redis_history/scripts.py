"""The Lua scripts: loaded from package data, registered once per client, and their result codes.

Each ``lua/<verb>-<NKEYS>.lua`` file is one atomic operation. A line
``--- @include "name"`` is replaced by ``lua/includes/name.lua`` at load time,
so shared helpers are written once; a script includes only what it uses,
because every call re-creates the helpers it carries.
"""

from __future__ import annotations

import re
import weakref
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from redis_history.errors import (
    CorruptHistoryError,
    HistoryError,
    InvalidTransition,
    LockLostError,
    RoleOrderError,
    StaleSnapshotError,
    ToolPairingError,
)

__all__ = ["ERRORS", "script_names", "script_source", "scripts_for"]

ERRORS: dict[int, type[HistoryError]] = {
    1: RoleOrderError,
    2: ToolPairingError,
    3: StaleSnapshotError,
    4: LockLostError,
    5: CorruptHistoryError,
    6: InvalidTransition,
}
"""Refusal codes mapped to the exceptions they raise.

A script replies with its result when it succeeds, and with ``{code, index,
reason}`` (the only array a write script returns) when it refuses, having
written nothing."""

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)
_SOURCE_TREE = Path(__file__).resolve().parent.parent / "lua"


def _read(relative: str) -> str:
    package = resources.files("redis_history.lua") if _has_package_data() else None
    if package is not None:
        return package.joinpath(relative).read_text(encoding="utf-8")
    return (_SOURCE_TREE / relative).read_text(encoding="utf-8")


@cache
def _has_package_data() -> bool:
    try:
        return resources.files("redis_history.lua").joinpath("append-3.lua").is_file()
    except ModuleNotFoundError:
        return False


def _lua_dir_names() -> list[str]:
    if _has_package_data():
        root = resources.files("redis_history.lua")
        return sorted(p.name for p in root.iterdir() if p.name.endswith(".lua"))
    return sorted(p.name for p in _SOURCE_TREE.glob("*.lua"))


@cache
def script_names() -> tuple[str, ...]:
    """The operation names, e.g. ``append`` for ``append-3.lua``."""
    return tuple(name.rsplit("-", 1)[0] for name in _lua_dir_names())


@cache
def script_source(name: str) -> str:
    """The full source of one script, includes expanded."""
    (filename,) = [f for f in _lua_dir_names() if f.rsplit("-", 1)[0] == name]
    source = _read(filename)
    return _INCLUDE.sub(lambda m: _read(f"includes/{m.group(1)}.lua"), source)


_REGISTERED: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def scripts_for(client: Any) -> dict[str, Any]:
    """Every script registered on ``client`` (sync or asyncio), once per client."""
    scripts = _REGISTERED.get(client)
    if scripts is None:
        scripts = {name: client.register_script(script_source(name)) for name in script_names()}
        _REGISTERED[client] = scripts
    return scripts
