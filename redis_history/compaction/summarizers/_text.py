"""How summaries read: the ``Previously:`` prefix, earlier summaries, one-line and clipped text."""

from __future__ import annotations

from redis_history.endpoints import clip, one_line
from redis_history.models import Message

__all__ = ["NOTHING", "PREFIX", "clip", "one_line", "previous_summary"]

PREFIX = "Previously:"
"""How every built-in summary starts, so the agent model reads it as past context."""
NOTHING = "(nothing)"
"""What follows the prefix in a summary of nothing worth keeping."""


def previous_summary(message: Message) -> str | None:
    """The text of an earlier summary without its system prompt, or ``None`` for other messages."""
    if message.metadata.get("summary") is not True:
        return None
    text = message.content
    prompt = message.metadata.get("system_prompt")
    if isinstance(prompt, str) and prompt and text.startswith(prompt):
        text = text[len(prompt) :]
    text = text.strip()
    if text.startswith(PREFIX):
        text = text[len(PREFIX) :].strip()
    return "" if text == NOTHING else text
