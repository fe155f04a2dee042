"""The compaction state machine, which lived here:
``redis_history.compaction_state`` now, below the store that keeps and checks it. Each name
still resolves here, with a ``DeprecationWarning``."""

from __future__ import annotations

import warnings
from typing import Any

from redis_history import compaction_state

_MOVED = frozenset(compaction_state.__all__)
"""No ``__all__``: a star import of a module that moved gives nothing."""


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"{__name__}.{name} moved to redis_history.compaction_state.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(compaction_state, name)
