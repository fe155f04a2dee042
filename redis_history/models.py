"""Chat messages as immutable pydantic models, and their OpenAI wire format."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

__all__ = ["ROLES", "Message", "Role", "ToolCall", "new_message_id"]

Role = Literal["system", "user", "assistant", "tool"]
"""Who speaks: the four chat-completions roles."""

ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


def new_message_id() -> str:
    """A fresh, globally unique message id."""
    return uuid.uuid4().hex


def _now() -> datetime:
    return datetime.now(UTC)


class ToolCall(BaseModel):
    """One function call requested by an assistant message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=256)
    """The call id a tool message answers with ``tool_call_id``."""
    name: str = Field(min_length=1)
    """The function's name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The decoded JSON arguments."""

    def to_openai(self) -> dict[str, Any]:
        """This call in the chat-completions ``tool_calls`` format."""
        return {
            "id": self.id,
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": json.dumps(self.arguments, ensure_ascii=False),
            },
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Self:
        """Parse a chat-completions tool call; ``arguments`` may be a JSON string or an object."""
        function = data.get("function") or {}
        raw = function.get("arguments") or {}
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"tool call {data.get('id')!r} has arguments that are not JSON"
                ) from exc
        if not isinstance(raw, dict):
            raise ValueError(  # noqa: TRY004  (pydantic and callers expect ValueError for bad input)
                f"tool call {data.get('id')!r} arguments must be a JSON object"
            )
        return cls(id=data.get("id", ""), name=function.get("name", ""), arguments=raw)


class Message(BaseModel):
    """One chat message: the unit a history stores, validates and counts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default_factory=new_message_id, min_length=1, max_length=256)
    """Unique id, assigned on creation when not given; compaction fences on it."""
    role: Role
    """Who speaks."""
    content: str = ""
    """The text of the message (may be empty for an assistant that only calls tools)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Function calls requested by an assistant message."""
    tool_call_id: str | None = None
    """For a tool message: the id of the assistant tool call it answers."""
    name: str | None = None
    """Optional participant or tool name."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form JSON data the application keeps with the message."""
    created_at: datetime = Field(default_factory=_now)
    """When the message was created (UTC)."""

    @model_validator(mode="after")
    def _role_fields(self) -> Self:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError("only tool messages carry tool_call_id")
        ids = [call.id for call in self.tool_calls]
        if len(set(ids)) != len(ids):
            raise ValueError("tool call ids within one message must be unique")
        return self

    @classmethod
    def system(cls, content: str, **fields: Any) -> Self:
        """A system prompt."""
        return cls(role="system", content=content, **fields)

    @classmethod
    def user(cls, content: str, **fields: Any) -> Self:
        """A user message."""
        return cls(role="user", content=content, **fields)

    @classmethod
    def assistant(
        cls, content: str = "", *, tool_calls: Iterable[ToolCall] = (), **fields: Any
    ) -> Self:
        """An assistant reply, optionally requesting tool calls."""
        return cls(role="assistant", content=content, tool_calls=tuple(tool_calls), **fields)

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, **fields: Any) -> Self:
        """A tool result answering ``tool_call_id``."""
        return cls(role="tool", content=content, tool_call_id=tool_call_id, **fields)

    def to_openai(self) -> dict[str, Any]:
        """This message as a chat-completions request message."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
            if not self.content:
                out["content"] = None
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any], **fields: Any) -> Self:
        """Parse a chat-completions message; ``developer`` maps to ``system``.

        Content given as a list of parts keeps its text parts; any other part
        (an image, audio) raises ``ValueError`` rather than being dropped silently.
        """
        role = data.get("role")
        if role == "developer":
            role = "system"
        return cls(
            role=role,
            content=_text_content(data.get("content")),
            tool_calls=tuple(ToolCall.from_openai(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            **fields,
        )


def _text_content(content: str | Sequence[Mapping[str, Any]] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.get("type") != "text":
            raise ValueError(f"content part of type {part.get('type')!r} is not supported")
        texts.append(str(part.get("text", "")))
    return "".join(texts)


MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
"""Validates a whole list of messages in one call."""
