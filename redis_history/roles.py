"""Role order and tool pairing, in Python.

The write scripts enforce these rules inside Redis (``walk`` in ``lua/includes/walk.lua``);
this module states the same rules for code that has messages in hand: the
in-memory reference history and the compaction cut.

Two sets of role rules (:data:`Roles`) share the tool pairing (a result answers an open
call of the latest assistant message; no other message while a call is unanswered) and
a system message only first:

- ``"strict"``: a user message first or after a system or assistant one; an assistant
  message after a user or tool one.
- ``"lenient"``: a user message after anything; an assistant message after a user,
  assistant or tool one (not first, nor right after a system message). Two user messages in
  a row (a question sent in two messages) and two assistant messages in a row are taken.

Every list the strict rules take, the lenient ones take too, so code that reads what
either wrote checks it by the lenient rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from redis_history.errors import RoleOrderError, ToolPairingError
from redis_history.models import Message

__all__ = ["ROLES", "RoleState", "Roles", "check_roles"]

Roles: TypeAlias = Literal["strict", "lenient"]
"""Which role rules a history's writes check (``HistoryOptions.roles``); see the module."""

ROLES: tuple[Roles, ...] = get_args(Roles)
"""Every value of :data:`Roles`."""


def check_roles(value: object, name: str = "roles") -> Roles:
    """``value`` if it names a set of role rules.

    Raises:
        TypeError: ``value`` is not a string.
        ValueError: it names no set of rules.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be 'strict' or 'lenient', got {type(value).__name__}")
    if value not in ROLES:
        raise ValueError(f"{name} must be 'strict' or 'lenient', got {value!r}")
    return value


@dataclass(slots=True)
class RoleState:
    """The last role of a history and the tool call ids its latest assistant left unanswered."""

    role: str = ""
    open: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, messages: Iterable[Message]) -> RoleState:
        """The state after ``messages``, without checking them."""
        state = cls()
        state.advance_all(messages, check=False)
        return state

    def copy(self) -> RoleState:
        """An independent copy, to try a batch without committing to it."""
        return RoleState(self.role, list(self.open))

    def advance(
        self,
        message: Message,
        *,
        check: bool = True,
        index: int | None = None,
        pairing_only: bool = False,
        roles: Roles = "strict",
    ) -> None:
        """Apply one message; when ``check``, raise if it may not come next by the ``roles``
        rules (only for its tool pairing when ``pairing_only``: summaries, whose roles
        lead)."""
        if check:
            self._check(message, index, pairing_only=pairing_only, lenient=roles == "lenient")
        if message.role == "assistant":
            self.open = [call.id for call in message.tool_calls]
        elif message.role == "tool":
            if message.tool_call_id in self.open:
                self.open.remove(message.tool_call_id)
        else:
            self.open = []
        self.role = message.role

    def advance_all(
        self,
        messages: Iterable[Message],
        *,
        check: bool = True,
        pairing_only: bool = False,
        roles: Roles = "strict",
    ) -> None:
        """Apply messages in order; the error names the failing index within ``messages``."""
        for index, message in enumerate(messages):
            self.advance(message, check=check, index=index, pairing_only=pairing_only, roles=roles)

    def _check(
        self, message: Message, index: int | None, *, pairing_only: bool, lenient: bool
    ) -> None:
        role, prev = message.role, self.role
        if role == "system" and not pairing_only:
            if prev:
                raise RoleOrderError(
                    f"a system message may only come first, not after {prev}", index=index
                )
        elif role == "tool":
            if message.tool_call_id not in self.open:
                raise ToolPairingError(
                    f"tool result for {message.tool_call_id} answers no open tool call",
                    index=index,
                )
        else:
            if self.open:
                raise ToolPairingError(
                    f"{role} message while tool calls are unanswered: {', '.join(self.open)}",
                    index=index,
                )
            if pairing_only:
                return
            if lenient:
                if role == "assistant" and prev in ("", "system"):
                    raise RoleOrderError(
                        f"an assistant message may not follow {prev or 'nothing'}", index=index
                    )
                return
            if role == "user" and prev not in ("", "system", "assistant"):
                raise RoleOrderError(f"a user message may not follow {prev}", index=index)
            if role == "assistant" and prev not in ("user", "tool"):
                raise RoleOrderError(
                    f"an assistant message may not follow {prev or 'nothing'}", index=index
                )
