"""Role order and tool pairing, in Python.

The write scripts enforce these rules inside Redis (``walk`` in ``lua/includes/walk.lua``);
this module states the same rules for code that has messages in hand: the
in-memory reference history and the compaction cut.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from redis_history.errors import RoleOrderError, ToolPairingError
from redis_history.models import Message

__all__ = ["RoleState"]


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
    ) -> None:
        """Apply one message; when ``check``, raise if it may not come next (only for its
        tool pairing when ``pairing_only``: summaries, whose roles lead)."""
        if check:
            self._check(message, index, pairing_only=pairing_only)
        if message.role == "assistant":
            self.open = [call.id for call in message.tool_calls]
        elif message.role == "tool":
            if message.tool_call_id in self.open:
                self.open.remove(message.tool_call_id)
        else:
            self.open = []
        self.role = message.role

    def advance_all(
        self, messages: Iterable[Message], *, check: bool = True, pairing_only: bool = False
    ) -> None:
        """Apply messages in order; the error names the failing index within ``messages``."""
        for index, message in enumerate(messages):
            self.advance(message, check=check, index=index, pairing_only=pairing_only)

    def _check(self, message: Message, index: int | None, *, pairing_only: bool) -> None:
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
            if role == "user" and prev not in ("", "system", "assistant"):
                raise RoleOrderError(f"a user message may not follow {prev}", index=index)
            if role == "assistant" and prev not in ("user", "tool"):
                raise RoleOrderError(
                    f"an assistant message may not follow {prev or 'nothing'}", index=index
                )
