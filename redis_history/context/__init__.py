"""The context layer: what a pod does with a history before and after each model call.

It sits on the store and imports it; the store never imports it. The grouping
into turns lives in the store (``redis_history.turns``, which ``history.turns()``
reads with) and is re-exported here with the rest of the layer.
"""

from __future__ import annotations

from redis_history.context.formats import (
    ANTHROPIC_THINKING,
    IS_ERROR,
    OPENAI_REASONING,
    REFUSAL,
    WIRE_FORMATS,
    WireFormat,
    ainto_request,
    into_request,
    parse,
    parse_response,
    render,
)
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
    "ANTHROPIC_THINKING",
    "IS_ERROR",
    "OPENAI_REASONING",
    "REFUSAL",
    "WIRE_FORMATS",
    "Step",
    "ToolPair",
    "ToolStep",
    "Turn",
    "WireFormat",
    "ainto_request",
    "from_turns",
    "group_entries",
    "group_turns",
    "into_request",
    "parse",
    "parse_response",
    "render",
    "to_messages",
]
