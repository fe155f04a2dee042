"""How summaries read: the ``Previously:`` prefix, earlier summaries, one-line and clipped text."""

from __future__ import annotations

from redis_history.models import Message

__all__ = ["NOTHING", "PREFIX", "clip", "one_line", "previous_summary"]

PREFIX = "Previously:"
"""How every built-in summary starts, so the agent model reads it as past context."""
NOTHING = "(nothing)"
"""What follows the prefix in a summary of nothing worth keeping."""
_ELLIPSIS = "…"


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


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, newlines included, as one space."""
    return " ".join(text.split())


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word if one is near, with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= len(_ELLIPSIS):
        return _ELLIPSIS[:limit]
    cut = text[: limit - len(_ELLIPSIS)]
    space = cut.rfind(" ")
    if space >= len(cut) * 2 // 3:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS
