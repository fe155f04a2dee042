"""How a history stores its conversation: the options every front end takes, in one frozen
object (:class:`HistoryOptions`), checked when it is made."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypedDict, cast

from redis_history import limits
from redis_history.roles import Roles, check_roles
from redis_history.store.keys import DEFAULT_NAMESPACE, DEFAULT_PREFIX, validate_scope
from redis_history.tokens import TokenCounter, resolve_counter

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "HistoryOptions", "OptionFields"]

DEFAULT_MAX_MESSAGE_BYTES = limits.MAX_MESSAGE_BYTES


@dataclass(frozen=True, slots=True)
class HistoryOptions:
    """A history's options, shared by any number of histories (a fork's has its source's).

    Attributes:
        prefix: the first part of every key.
        token_counter: a counter, an alias (``estimate``, ``o200k_base``, ``cl100k_base``,
            ``heuristic``), a model name or a dotted path; by default a fast estimate of
            o200k counts (``estimate``), which the input tokens the LLM reports correct;
            ``"o200k_base"`` (or a model name) counts exactly. Resolved to a counter here.
        validate: check role order and tool pairing on every write.
        roles: the role order those checks hold writes to: ``"strict"`` (user and
            assistant alternate) or ``"lenient"`` (a user message may follow a user
            message, an assistant message an assistant message); tool pairing and a
            system message only first hold in both (:mod:`redis_history.roles`). Each
            write checks its own messages against the stored state, whichever rules
            wrote that.
        max_message_bytes: the largest stored message (1 to ``limits.MAX_MESSAGE_BYTES``).
        ttl: a sliding expiry (seconds or timedelta) stored with the conversation: every
            write, by any writer, refreshes it on every key.
        wait_replicas: after each write of the conversation, wait (``WAIT``) until this
            many replicas have it, and raise ``ReplicationError`` if they do not in time.
        wait_timeout: how long that wait may take (seconds or timedelta).

    Raises:
        ValueError, TypeError: an unusable option.
    """

    prefix: str = DEFAULT_PREFIX
    token_counter: TokenCounter | str | None = field(default=None, compare=False)
    validate: bool = True
    roles: Roles = "strict"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ttl: float | timedelta | None = None
    wait_replicas: int = 0
    wait_timeout: float | timedelta = 1.0

    def __post_init__(self) -> None:
        validate_scope(DEFAULT_NAMESPACE, self.prefix)
        object.__setattr__(self, "token_counter", resolve_counter(self.token_counter))
        if not isinstance(self.validate, bool):
            raise TypeError(f"validate must be a bool, got {type(self.validate).__name__}")
        check_roles(self.roles)
        limits.count(
            self.max_message_bytes, "max_message_bytes", low=1, high=DEFAULT_MAX_MESSAGE_BYTES
        )
        limits.ttl_ms(self.ttl)
        limits.count(self.wait_replicas, "wait_replicas")
        limits.ttl_ms(self.wait_timeout, "wait_timeout")

    @property
    def counter(self) -> TokenCounter:
        """The resolved token counter."""
        return cast(TokenCounter, self.token_counter)

    def merged(self, overrides: OptionFields) -> HistoryOptions:
        """These options with ``overrides`` (the constructors' keyword form) applied."""
        return dataclasses.replace(self, **overrides) if overrides else self


class OptionFields(TypedDict, total=False):
    """:class:`HistoryOptions`'s fields as keyword arguments of a history's constructor."""

    prefix: str
    token_counter: TokenCounter | str | None
    validate: bool
    roles: Roles
    max_message_bytes: int
    ttl: float | timedelta | None
    wait_replicas: int
    wait_timeout: float | timedelta
