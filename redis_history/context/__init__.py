"""The context layer: what a pod does with a history before and after each model call.

It sits on the store and imports it; the store never imports it.
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

__all__ = [
    "ANTHROPIC_THINKING",
    "IS_ERROR",
    "OPENAI_REASONING",
    "REFUSAL",
    "WIRE_FORMATS",
    "WireFormat",
    "ainto_request",
    "into_request",
    "parse",
    "parse_response",
    "render",
]
