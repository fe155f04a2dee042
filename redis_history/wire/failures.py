"""What comes back from Redis when a call fails, and what the store makes of it.

redis-py raises one family of errors for outages, refusals, ACL denials, a busy server and
data of the wrong type; every front end (the histories, the memory, the operator's
commands, the workers) turns them into the store's typed errors through :func:`redis_error`
and its table :data:`FAILURES`, so a failure reads the same whichever feature met it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis import exceptions as redis_errors

from redis_history.errors import (
    AccessDeniedError,
    CorruptHistoryError,
    HistoryError,
    ScriptsNotLoadedError,
    StoreUnavailableError,
    UnsupportedClientError,
)
from redis_history.redact import NOTHING, Redactor

__all__ = [
    "FAILURES",
    "MOVED_ON",
    "RedisFailure",
    "ScriptsNotLoaded",
    "access_denied",
    "bytes_client",
    "denial_advice",
    "no_function",
    "outage_advice",
    "redis_error",
    "resent",
    "scripts_denied",
]

_UNAVAILABLE = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    redis_errors.ReadOnlyError,
    redis_errors.MovedError,
    redis_errors.AskError,
    redis_errors.RedisClusterException,
    redis_errors.InvalidResponse,  # what answered does not speak Redis's protocol
)
"""redis-py errors that mean "not reachable now, retry later", not "refused"."""

_BUSY = re.compile(r"^BUSY\b|Script killed by user|script timed out", re.IGNORECASE)
"""Replies of a server busy running another script, or that stopped this one: the outcome
of the call is unknown (a reply lost to a timeout, then a retry refused as ``BUSY``)."""

RedisFailure = (redis_errors.RedisError, redis_errors.RedisClusterException)
"""Everything redis-py raises (``RedisClusterException`` is not a ``RedisError``)."""

_DENIED = (
    redis_errors.AuthenticationError,
    redis_errors.AuthenticationWrongNumberOfArgsError,
    redis_errors.NoPermissionError,
)
_DENIED_REPLIES = (
    "NOPERM",
    "NOAUTH",
    "WRONGPASS",
    "The user executing the script can't",
    "Protocol error: unauthenticated",
)
"""What Redis says when it refuses the credentials or the ACL denies a key or a command. The
fourth is how Redis 6.2 and 7.0 word an ACL refusal inside a script; the last is how they
refuse a long command from a client that never authenticated, which redis-py before 8 lets
through its handshake on Redis 7.0 (that answers its ``CLIENT SETINFO`` "unknown
subcommand", not NOAUTH)."""


class ScriptsNotLoaded(redis_errors.ResponseError):
    """The server knows neither the store's function nor its script, and the user may not
    send the script's source (``EVAL``): an operator has not loaded them (``redis-history
    load-scripts``), or the server lost them (a Redis 6.2 restart)."""


_SCRIPTS_DENIED = re.compile(r"'(?:eval|evalsha)' command", re.IGNORECASE)
_NO_FUNCTION = re.compile(r"Function not found", re.IGNORECASE)


def scripts_denied(exc: BaseException) -> bool:
    """Whether ``exc`` is the ACL denying the user ``EVAL`` or ``EVALSHA``: a user that may run
    only the store's functions (a tenant's rule)."""
    return isinstance(exc, redis_errors.NoPermissionError) and bool(
        _SCRIPTS_DENIED.search(str(exc))
    )


def no_function(exc: BaseException) -> bool:
    """Whether ``exc`` is ``FCALL`` finding no such function (the library is not loaded)."""
    return isinstance(exc, redis_errors.ResponseError) and bool(_NO_FUNCTION.search(str(exc)))


def resent(reply: Any) -> bool:
    """Whether a script's pipelined error reply is one :func:`~redis_history.wire.lane.send`
    answers by another command (the script's source, or its function): the pipeline's
    caller sends that call again through it."""
    return (
        isinstance(reply, redis_errors.NoScriptError) or scripts_denied(reply) or no_function(reply)
    )


def access_denied(exc: BaseException) -> bool:
    """Whether a redis-py error is Redis refusing the credentials (none, wrong, a disabled
    user) or the ACL denying a key or command: neither an outage nor worth a retry."""
    if isinstance(exc, _DENIED):
        return True
    return isinstance(exc, redis_errors.ResponseError) and any(
        reply in str(exc) for reply in _DENIED_REPLIES
    )


_NO_CREDENTIALS = re.compile(
    r"NOAUTH|Authentication required|HELLO must be called with the client already "
    r"authenticated|Protocol error: unauthenticated",
    re.IGNORECASE,
)
_WRONG_CREDENTIALS = re.compile(r"WRONGPASS|invalid username-password|user is disabled", re.I)
_NOT_PERMITTED = re.compile(r"NOPERM|No permissions|The user executing the script can't", re.I)


_REFUSED = re.compile(r"Connection refused|Error 111\b", re.IGNORECASE)
_UNKNOWN_HOST = re.compile(
    r"Name or service not known|nodename nor servname|Temporary failure in name resolution|"
    r"Error -[23]\b",
    re.IGNORECASE,
)


def outage_advice(text: str) -> str:
    """What to do about a server that could not be reached, from redis-py's words (``""``
    when they name nothing the advice could): nothing listening there, or a host name
    that does not resolve."""
    if _REFUSED.search(text):
        return (
            " (nothing listens there: start a Redis, or name the one to use in the URL, "
            "REDIS_HISTORY_URL or --redis-url)"
        )
    if _UNKNOWN_HOST.search(text):
        return " (the host name does not resolve: check the URL, REDIS_HISTORY_URL or --redis-url)"
    return ""


def denial_advice(text: str) -> str:
    """What to do about an access denial, from what Redis said (``""`` when it says nothing
    the advice could name): no password given, a wrong one, or an ACL rule that lacks a key
    or a command."""
    if _NO_CREDENTIALS.search(text):
        return (
            "it needs a password and none was given: put it in the URL "
            "(redis://:PASSWORD@HOST:PORT/DB, or redis://USER:PASSWORD@... for an ACL user) "
            "or in REDIS_HISTORY_URL"
        )
    if _WRONG_CREDENTIALS.search(text):
        return "the URL's user or password was refused (check REDIS_HISTORY_URL or --redis-url)"
    if _NOT_PERMITTED.search(text):
        return (
            "the user's ACL rule lacks a key or a command the store uses "
            "(`redis-history acl` prints the rule a tenant needs)"
        )
    return ""


@dataclass(frozen=True, slots=True)
class _Rule:
    """One row of :data:`FAILURES`: which redis-py errors it covers, the typed error they
    become, and its message (``{where}``, ``{data}`` and the redacted ``{text}`` filled in)."""

    matches: Callable[[Exception, str], bool]
    error: type[HistoryError]
    says: str


FAILURES = (
    _Rule(
        lambda exc, _: isinstance(exc, ScriptsNotLoaded),
        ScriptsNotLoadedError,
        "{where} has not the store's scripts, and this user may not load them: "
        "an operator runs `redis-history load-scripts` ({text})",
    ),
    # before the outages: redis-py's AuthenticationError is a ConnectionError
    _Rule(
        lambda exc, _: access_denied(exc),
        AccessDeniedError,
        "{where} denied access: {advice}{text}",
    ),
    _Rule(
        lambda exc, _: isinstance(exc, _UNAVAILABLE),
        StoreUnavailableError,
        "{where} is unavailable: {text}{hint}",
    ),
    _Rule(
        lambda exc, text: isinstance(exc, redis_errors.ResponseError) and bool(_BUSY.search(text)),
        StoreUnavailableError,
        "{where} was busy or stopped a script; the write may or may not have been applied, "
        "and repeating it is safe: {text}",
    ),
    _Rule(
        lambda exc, text: isinstance(exc, redis_errors.ResponseError) and "WRONGTYPE" in text,
        CorruptHistoryError,
        "{data} holds the wrong data type: {text}",
    ),
)
"""How a redis-py error becomes the store's, the first row that matches winning; any other
is a :class:`~redis_history.errors.HistoryError`: "{where} refused the operation"."""


def redis_error(
    exc: Exception,
    redactor: Redactor = NOTHING,
    *,
    where: str = "Redis",
    data: str = "a conversation key",
) -> HistoryError:
    """The typed error for a redis-py error (callers ``raise ... from exc``), ``exc`` and the
    errors chained to it redacted in place: a server may echo a password (``AUTH``).

    ``where`` names the server in the message, ``data`` what a ``WRONGTYPE`` was about.
    """
    text = redactor.exception(exc)
    for rule in FAILURES:
        if rule.matches(exc, text):
            advice = denial_advice(text) if rule.error is AccessDeniedError else ""
            if advice:
                advice += "; Redis said: "
            hint = outage_advice(text) if rule.error is StoreUnavailableError else ""
            return rule.error(
                rule.says.format(where=where, data=data, text=text, advice=advice, hint=hint)
            )
    return HistoryError(f"{where} refused the operation: {text}")


def bytes_client(client: Any, what: str = "the store") -> Any:
    """``client`` if its replies are bytes: one made with ``decode_responses=True`` (redis-py's
    four client classes and fakeredis's say so in ``get_connection_kwargs()``) would fail
    the first read of data that is not UTF-8, a compressed text or a part's data, with a
    ``UnicodeDecodeError`` from deep inside redis-py.

    Raises:
        UnsupportedClientError: a client that decodes replies.
    """
    get = getattr(client, "get_connection_kwargs", None)
    options = get() if callable(get) else None
    if isinstance(options, dict) and options.get("decode_responses"):
        raise UnsupportedClientError(
            f"{what} needs a Redis client whose replies are bytes: this one was made with "
            "decode_responses=True, and what the store keeps is not all UTF-8 (long texts "
            "are kept compressed, parts' data as it is); make one without it"
        )
    return client


MOVED_ON = (
    redis_errors.SlotNotCoveredError,
    redis_errors.MovedError,
    redis_errors.AskError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
)
"""What a write sent straight to a slot's primary (to WAIT on its connection) meets when the
slot moved or its node failed: refresh the cluster's layout and send it again (it is
idempotent)."""
