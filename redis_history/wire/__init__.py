"""The Redis plumbing every feature shares: a round trip as data (:mod:`.call`), the lane
that sends it (:mod:`.lane`), what a failed call means (:mod:`.failures`), the Lua
scripts, their loading and result codes (:mod:`.scripts`), and the plans that write a
multi-step operation once for the sync and asyncio APIs (:mod:`.plans`)."""

from __future__ import annotations

from redis_history.wire.call import Call
from redis_history.wire.failures import (
    FAILURES,
    MOVED_ON,
    RedisFailure,
    ScriptsNotLoaded,
    access_denied,
    bytes_client,
    denial_advice,
    no_function,
    outage_advice,
    redis_error,
    resent,
    scripts_denied,
)
from redis_history.wire.plans import Plan, adrive, drive

__all__ = [
    "FAILURES",
    "MOVED_ON",
    "Call",
    "Plan",
    "RedisFailure",
    "ScriptsNotLoaded",
    "access_denied",
    "adrive",
    "bytes_client",
    "denial_advice",
    "drive",
    "no_function",
    "outage_advice",
    "redis_error",
    "resent",
    "scripts_denied",
]
