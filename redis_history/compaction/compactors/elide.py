"""A compactor that keeps every turn and cuts only the bulky tool output out of the old ones."""

from __future__ import annotations

from redis_history.compaction.compactors.base import CompactorRequest
from redis_history.models import Message
from redis_history.parts import TextPart, stand_in

__all__ = ["DEFAULT_MIN_BYTES", "ToolOutputElider", "elided_stub"]

DEFAULT_MIN_BYTES = 4096
"""Tool output at least this long (UTF-8 bytes, about a thousand tokens) is elided."""


def elided_stub(tool: str, size: int) -> str:
    """The text that stands in for ``size`` bytes of ``tool``'s output."""
    return f"[tool output elided: {tool}, {size:,} bytes]"


class ToolOutputElider:
    """Keeps every turn it is given, but replaces each tool result of at least ``min_bytes``
    by a short stub naming the tool and the size removed.

    The stub is the same tool message (same id, same ``tool_call_id``, so every
    call keeps its result) with the text :func:`elided_stub` writes and
    ``metadata["elided"] = {"tool": ..., "bytes": ...}``; the original goes to
    the archive, as every compaction's originals do, so the transcript still
    holds it. Only the turns before the tail the policy protects are given to a
    compactor: recent tool output stays whole. With nothing that large, it has
    nothing to do (and the compaction reports ``exhausted``).

    With ``images=True`` it also replaces every image, file and audio part of those old
    turns (a user's screenshot, a tool's chart) by a text stand-in
    (:func:`~redis_history.parts.stand_in`, ``[image: image/png, 182 KB]``), keeping the
    message's id and its text, with ``metadata["elided"] = {"parts": n}``: old images
    cost hundreds of tokens each in every later request.
    """

    def __init__(self, min_bytes: int = DEFAULT_MIN_BYTES, *, images: bool = False) -> None:
        """Set the threshold.

        Args:
            min_bytes: elide tool output at least this many UTF-8 bytes long.
            images: also replace the old turns' images, files and audio by stand-ins.

        Raises:
            TypeError: ``min_bytes`` is not an int.
            ValueError: ``min_bytes`` is below 1.
        """
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int):
            raise TypeError(f"min_bytes must be an int, got {type(min_bytes).__name__}")
        if min_bytes < 1:
            raise ValueError(f"min_bytes must be at least 1, got {min_bytes}")
        self.min_bytes = min_bytes
        self.images = bool(images)

    def compact(self, request: CompactorRequest) -> list[Message] | None:
        """Every message of ``request.turns``, bulky tool results stubbed; ``None`` if none is."""
        tools = {
            pair.result.id: pair.call.name for turn in request.turns for pair in turn.tool_pairs
        }
        out: list[Message] = []
        elided = False
        for message in request.messages:
            size = _size(message)
            tool = tools.get(message.id)
            if tool is not None and message.role == "tool" and size >= self.min_bytes:
                out.append(_stub(message, tool, size))
                elided = True
            elif self.images and any(not isinstance(p, TextPart) for p in message.parts):
                out.append(_without_media(message))
                elided = True
            else:
                out.append(message)
        return out if elided else None

    def __repr__(self) -> str:
        return f"ToolOutputElider(min_bytes={self.min_bytes}, images={self.images})"


def _size(message: Message) -> int:
    """The bytes of a message's text and of its parts' inline data (a screenshot)."""
    size = len(message.text.encode("utf-8", "surrogatepass"))
    return size + sum(len(data) for part in message.parts if (data := getattr(part, "data", None)))


def _without_media(message: Message) -> Message:
    """``message`` with each part but text replaced by its stand-in text."""
    media = sum(not isinstance(p, TextPart) for p in message.parts)
    parts = tuple(
        p if isinstance(p, TextPart) else TextPart(text=stand_in(p)) for p in message.parts
    )
    metadata = {**message.metadata, "elided": {"parts": media}}
    return message.model_copy(update={"parts": parts, "metadata": metadata})


def _stub(message: Message, tool: str, size: int) -> Message:
    """``message`` with its content replaced by the stub."""
    return Message.tool(
        elided_stub(tool, size),
        tool_call_id=message.tool_call_id or "",
        id=message.id,
        name=message.name,
        created_at=message.created_at,
        metadata={**message.metadata, "elided": {"tool": tool, "bytes": size}},
    )
