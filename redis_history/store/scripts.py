"""The Lua scripts' loading and result codes, which lived here: ``redis_history.wire.scripts``
now, in the plumbing every feature shares. Each name still resolves here, with a
``DeprecationWarning``."""

from __future__ import annotations

import warnings
from typing import Any

from redis_history.wire import scripts

_MOVED = frozenset(scripts.__all__)
"""No ``__all__``: a star import of a module that moved gives nothing."""


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"{__name__}.{name} moved to redis_history.wire.scripts.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(scripts, name)
