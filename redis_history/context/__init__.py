"""The context layer: what a pod does with a history before and after each model call.

It sits on the store and imports it; the store never imports it. Wire formats
(:mod:`~redis_history.context.formats`), budget fitting (:mod:`~redis_history.context.budget`)
and the :class:`~redis_history.context.manager.HistoryManager` that puts them together with
long-term memory (:mod:`redis_history.memory`). The grouping
into turns lives in the store (``redis_history.turns``, which ``history.turns()``
reads with) and is re-exported here with the rest of the layer.
"""

from __future__ import annotations

from redis_history.context.budget import (
    FRAMINGS,
    Framing,
    fit_to_budget,
    message_price,
    request_tokens,
)
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
from redis_history.context.manager import (
    AsyncHistoryManager,
    Diagnostics,
    HistoryManager,
    HistoryManagerConfig,
    PreparedRequest,
    Strategy,
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
    "FRAMINGS",
    "IS_ERROR",
    "OPENAI_REASONING",
    "REFUSAL",
    "WIRE_FORMATS",
    "AsyncHistoryManager",
    "Diagnostics",
    "Framing",
    "HistoryManager",
    "HistoryManagerConfig",
    "PreparedRequest",
    "Step",
    "Strategy",
    "ToolPair",
    "ToolStep",
    "Turn",
    "WireFormat",
    "ainto_request",
    "fit_to_budget",
    "from_turns",
    "group_entries",
    "group_turns",
    "into_request",
    "message_price",
    "parse",
    "parse_response",
    "render",
    "request_tokens",
    "to_messages",
]
