"""The extractive summarizer: no model, the facts worth keeping, verbatim, within a length limit."""

from __future__ import annotations

from collections.abc import Sequence

from redis_history.compaction.summarizers._text import (
    NOTHING,
    PREFIX,
    clip,
    one_line,
    previous_summary,
)
from redis_history.compaction_policy import CompactionContext
from redis_history.models import Message

__all__ = ["ExtractiveSummarizer"]

_NOTHING = f"{PREFIX} {NOTHING}"
_MIN_LINE = 40
"""Lines cut shorter than this say little: drop whole lines from the middle instead."""


def _fit(lines: list[str], budget: int) -> list[str]:
    """Clip the longest lines first, to one common cap, so all of them fit in ``budget``."""
    if sum(map(len, lines)) <= budget:
        return lines
    remaining, cap = budget, 0
    lengths = sorted(map(len, lines))
    for i, length in enumerate(lengths):
        share = max(remaining, 0) // (len(lengths) - i)
        if length > share:
            cap = share
            break
        remaining -= length
    return [clip(line, cap) for line in lines]


class ExtractiveSummarizer:
    """A summary without a model: earlier summaries, first and last user message, tool results.

    The output starts with ``Previously:``, keeps the chosen texts in
    conversation order (whitespace collapsed), one per line, and never exceeds
    ``max_chars`` characters: when it would, the longest lines are cut first,
    each ending with an ellipsis, and when there are too many lines to keep
    each readable, whole lines go from the middle (the oldest facts and the
    latest request stay). Assistant replies and the system prompt are left
    out. The same contents always give the same output.
    """

    def __init__(self, max_chars: int = 2000) -> None:
        """Set the length limit.

        Args:
            max_chars: the longest summary, in characters.

        Raises:
            TypeError: ``max_chars`` is not an int.
            ValueError: ``max_chars`` is shorter than ``"Previously: (nothing)"``.
        """
        if isinstance(max_chars, bool) or not isinstance(max_chars, int):
            raise TypeError(f"max_chars must be an int, got {type(max_chars).__name__}")
        if max_chars < len(_NOTHING):
            raise ValueError(f"max_chars must be at least {len(_NOTHING)}, got {max_chars}")
        self.max_chars = max_chars

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """The extract of ``messages``; ``"Previously: (nothing)"`` when nothing is worth keeping.

        Args:
            messages: the messages to summarize, oldest first.

        Returns:
            Text starting with ``Previously:``, at most ``max_chars`` characters long.
        """
        lines = _extract(messages)
        if not lines:
            return _NOTHING
        room = self.max_chars - len(PREFIX)
        while len(lines) > 1 and sum(min(len(line), _MIN_LINE) + 1 for line in lines) > room:
            del lines[len(lines) // 2]  # keep the oldest facts and the latest request
        # The header and one newline before each line are never clipped.
        budget = self.max_chars - len(PREFIX) - len(lines)
        return clip("\n".join([PREFIX, *_fit(lines, budget)]), self.max_chars)

    def __repr__(self) -> str:
        return f"ExtractiveSummarizer(max_chars={self.max_chars})"


def _extract(messages: Sequence[Message]) -> list[str]:
    """The lines an extractive summary keeps, in conversation order."""
    users = [i for i, m in enumerate(messages) if m.role == "user" and m.readable.strip()]
    first, last = (users[0], users[-1]) if users else (-1, -1)
    call_names = {call.id: call.name for m in messages for call in m.tool_calls}
    lines: list[str] = []
    for i, message in enumerate(messages):
        previous = previous_summary(message)
        if previous is not None:
            lines += [one_line(line) for line in previous.splitlines() if line.strip()]
        elif i in (first, last):
            label = "user" if first == last else ("user (first)" if i == first else "user (last)")
            lines.append(f"- {label}: {one_line(message.readable)}")
        elif message.role == "tool" and message.readable.strip():
            name = message.name or call_names.get(message.tool_call_id or "")
            label = f"tool {name}" if name else "tool result"
            lines.append(f"- {label}: {one_line(message.readable)}")
    return lines
