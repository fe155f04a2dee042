"""The compaction state machine, which lived here:
``redis_history.compaction_state`` now, below the store that keeps and checks it. Each name
still resolves here, with a ``DeprecationWarning``."""

from __future__ import annotations

from redis_history import compaction_state
from redis_history.deprecation import moved_to

__getattr__ = moved_to(compaction_state, __name__)
