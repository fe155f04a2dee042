"""The compaction state machine (the seed's ``CompactionState``), as a small pure type.

::

    Ready ──compacted(c)──▶ CompactedThisTurn{c} ──advance_turn──▶ Cooling{c} if c > 0, else Ready
      │                          └──exhausted──▶ Exhausted{false}
      └──exhausted──▶ Exhausted{false} ──warned (once)──▶ Exhausted{true}
    Cooling{n} ──advance_turn──▶ Cooling{n-1}, and Cooling{1} ──advance_turn──▶ Ready
    Cooling{n} ──compacted(c)──▶ CompactedThisTurn{c}   (a hard-limit compaction)
    Exhausted{w} ──compacted(c)──▶ CompactedThisTurn{c}  (tried again once grown)

Exhausted is not reachable from Cooling. It ends compaction only until the conversation
has grown enough that a cut may exist (:meth:`CompactionPolicy.due
<redis_history.compaction_policy.CompactionPolicy.due>`): a conversation lives across many
pods and days, and "too few messages now" is not "compaction can never help". The live
length and the reason when compaction gave up are kept beside the state (``xlen``,
``xwhy``). The state is stored in the
conversation's meta hash as one field (:meth:`CompactionState.encode`), and
every transition is applied there by ``lua/compaction_state-4.lua``, which
implements this same map; a test checks the two agree on every state and event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from redis_history.errors import InvalidTransitionError

__all__ = ["CompactionState", "Event"]

Kind = Literal["ready", "compacted", "cooling", "exhausted"]
Event = Literal["advance_turn", "compacted", "exhausted", "warned"]


@dataclass(frozen=True, slots=True)
class CompactionState:
    """One of ``Ready``, ``CompactedThisTurn{cooldown}``, ``Cooling{turns_remaining}``,
    ``Exhausted{warned}``; ``value`` is the cooldown, the turns remaining, or 1 if warned."""

    kind: Kind = "ready"
    value: int = 0

    @classmethod
    def ready(cls) -> CompactionState:
        """Compaction may run."""
        return cls("ready")

    @classmethod
    def compacted_this_turn(cls, cooldown: int) -> CompactionState:
        """Compacted during this turn; ``cooldown`` turns of rest follow."""
        return cls("compacted", _non_negative(cooldown))

    @classmethod
    def cooling(cls, turns_remaining: int) -> CompactionState:
        """Resting for ``turns_remaining`` more turns."""
        return cls("cooling", _non_negative(turns_remaining))

    @classmethod
    def exhausted(cls, *, warned: bool = False) -> CompactionState:
        """Compaction cannot help; ``warned`` once the one-shot warning was given."""
        return cls("exhausted", int(warned))

    def is_compacted_this_turn(self) -> bool:
        """Whether a compaction already ran this turn."""
        return self.kind == "compacted"

    def is_exhausted(self) -> bool:
        """Whether compaction has given up on this conversation."""
        return self.kind == "exhausted"

    def cooldown_remaining(self) -> int:
        """Turns until compaction may run again (0 when it may run now or is exhausted)."""
        return self.value if self.kind in ("compacted", "cooling") else 0

    @property
    def warned(self) -> bool:
        """For ``Exhausted``: whether the one-shot warning was given."""
        return self.kind == "exhausted" and self.value == 1

    def advance_turn(self) -> CompactionState:
        """The state at the next turn boundary."""
        if self.kind == "compacted" or (self.kind == "cooling" and self.value > 1):
            remaining = self.value if self.kind == "compacted" else self.value - 1
            return CompactionState.cooling(remaining) if remaining > 0 else CompactionState()
        if self.kind == "cooling":
            return CompactionState()
        return self

    def on_compacted(self, cooldown: int) -> CompactionState:
        """A compaction succeeded: from ``Ready``, ``Cooling`` when a hard limit forced it, or
        ``Exhausted`` when it was tried again once the conversation grew."""
        if self.kind not in ("ready", "cooling", "exhausted"):
            raise InvalidTransitionError(f"cannot record a compaction in state {self}")
        return CompactionState.compacted_this_turn(cooldown)

    def on_exhausted(self) -> CompactionState:
        """Compaction cannot help; from ``Ready`` or ``CompactedThisTurn`` (not ``Cooling``)."""
        if self.kind == "exhausted":
            return self
        if self.kind not in ("ready", "compacted"):
            raise InvalidTransitionError(f"cannot become exhausted from {self}")
        return CompactionState.exhausted()

    def on_warned(self) -> CompactionState:
        """The one-shot warning is being given: only from ``Exhausted{warned: false}``.

        Refused once given, so that of many pods racing to warn exactly one succeeds.
        """
        if self.kind != "exhausted" or self.value:
            raise InvalidTransitionError(f"no warning is due in state {self}")
        return CompactionState.exhausted(warned=True)

    def apply(self, event: Event, value: int = 0) -> CompactionState:
        """The transition named by ``event`` (``value`` is the cooldown for ``compacted``)."""
        if event == "advance_turn":
            return self.advance_turn()
        if event == "compacted":
            return self.on_compacted(value)
        if event == "exhausted":
            return self.on_exhausted()
        if event == "warned":
            return self.on_warned()
        raise InvalidTransitionError(f"unknown event {event!r}")

    def encode(self) -> str:
        """The meta-hash form, e.g. ``cooling:2``."""
        return f"{self.kind}:{self.value}"

    @classmethod
    def decode(cls, raw: str | bytes | None) -> CompactionState:
        """Parse :meth:`encode`'s form; a missing field is ``Ready``."""
        if raw is None:
            return cls()
        text = raw.decode() if isinstance(raw, bytes) else raw
        kind, _, value = text.partition(":")
        if kind not in ("ready", "compacted", "cooling", "exhausted") or not value.isdigit():
            raise ValueError(f"not a compaction state: {text!r}")
        return cls(kind, int(value))  # type: ignore[arg-type]

    def __str__(self) -> str:
        names = {
            "ready": "Ready",
            "compacted": f"CompactedThisTurn{{cooldown: {self.value}}}",
            "cooling": f"Cooling{{turns_remaining: {self.value}}}",
            "exhausted": f"Exhausted{{warned: {str(bool(self.value)).lower()}}}",
        }
        return names[self.kind]


def _non_negative(value: int) -> int:
    if value < 0:
        raise ValueError(f"expected a count >= 0, got {value}")
    return value
