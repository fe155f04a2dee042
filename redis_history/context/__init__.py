"""The context layer: what a pod does with a history before and after each model call.

It sits on the store and imports it; the store never imports it.
"""

from __future__ import annotations

from redis_history.turns import (
    Step,
    ToolPair,
    ToolStep,
    Turn,
    from_turns,
    group_entries,
    group_turns,
    to_messages,
)

__all__ = [
    "Step",
    "ToolPair",
    "ToolStep",
    "Turn",
    "from_turns",
    "group_entries",
    "group_turns",
    "to_messages",
]
