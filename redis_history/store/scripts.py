"""The Lua scripts' loading and result codes, which lived here: ``redis_history.wire.scripts``
now, in the plumbing every feature shares. Each name still resolves here, with a
``DeprecationWarning``."""

from __future__ import annotations

from redis_history.deprecation import moved_to
from redis_history.wire import scripts

__getattr__ = moved_to(scripts, __name__)
