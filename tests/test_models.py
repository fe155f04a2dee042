"""Messages: validation on construction and the OpenAI chat-completions wire format."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from redis_history import Message, ToolCall


def test_every_message_gets_a_unique_id() -> None:
    """Ids are assigned on creation and differ between messages."""
    ids = {Message.user("x").id for _ in range(100)}
    assert len(ids) == 100


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "user", "tool_calls": [ToolCall(id="a", name="f")]},
        {"role": "tool", "content": "no id"},
        {"role": "user", "tool_call_id": "a"},
        {
            "role": "assistant",
            "tool_calls": [ToolCall(id="a", name="f"), ToolCall(id="a", name="g")],
        },
        {"role": "wizard"},
        {"role": "user", "surprise": 1},
    ],
    ids=[
        "calls-on-user",
        "tool-without-id",
        "id-on-user",
        "duplicate-call-ids",
        "bad-role",
        "extra",
    ],
)
def test_inconsistent_messages_are_refused(fields: dict[str, Any]) -> None:
    """Fields that contradict the role are a validation error."""
    with pytest.raises(ValidationError):
        Message(**fields)


def test_openai_round_trip_with_tool_calls() -> None:
    """to_openai and from_openai are inverses, arguments as a JSON string on the wire."""
    assistant = Message.assistant(
        "", tool_calls=[ToolCall(id="c1", name="search", arguments={"q": "é"})]
    )
    wire = assistant.to_openai()
    assert wire == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "é"}'},
            }
        ],
    }
    back = Message.from_openai(wire, id=assistant.id, created_at=assistant.created_at)
    assert back == assistant
    tool = Message.tool("42", tool_call_id="c1", name="search")
    assert tool.to_openai() == {  # the API gives a tool result no name
        "role": "tool",
        "content": "42",
        "tool_call_id": "c1",
    }
    assert Message.from_openai(tool.to_openai()).tool_call_id == "c1"


def test_from_openai_accepts_developer_and_text_parts() -> None:
    """The developer role is a system prompt; text content parts are joined."""
    message = Message.from_openai(
        {
            "role": "developer",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        }
    )
    assert (message.role, message.content) == ("system", "ab")


def test_from_openai_refuses_what_it_cannot_keep() -> None:
    """Unknown parts, an image without a source and non-JSON arguments raise instead of
    being dropped."""
    with pytest.raises(ValueError, match="'refusal' is not supported"):
        Message.from_openai({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]})
    with pytest.raises(ValueError, match="exactly one of data or url"):
        Message.from_openai({"role": "user", "content": [{"type": "image_url", "image_url": {}}]})
    with pytest.raises(ValueError, match="not JSON"):
        ToolCall.from_openai({"id": "c", "function": {"name": "f", "arguments": "{oops"}})


class _Opaque:
    """An object JSON has no form for."""


NOT_JSON: dict[str, object] = {
    "set": {1, 2},
    "tuple": (1, 2),
    "bytes": b"raw",
    "datetime": datetime(2026, 1, 1, tzinfo=UTC),
    "object": _Opaque(),
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "nested-nan": {"scores": [1.0, math.nan]},
}


@pytest.mark.parametrize("value", list(NOT_JSON.values()), ids=list(NOT_JSON))
def test_metadata_must_be_json_data(value: object) -> None:
    """A non-JSON value or a non-finite float in metadata raises ValidationError naming it."""
    with pytest.raises(ValidationError, match=r"metadata\.bad"):
        Message.user("u", metadata={"bad": value})


@pytest.mark.parametrize("value", list(NOT_JSON.values()), ids=list(NOT_JSON))
def test_tool_arguments_must_be_json_data(value: object) -> None:
    """A non-JSON value or a non-finite float in tool-call arguments raises ValidationError."""
    with pytest.raises(ValidationError, match=r"arguments\.bad"):
        ToolCall(id="c1", name="f", arguments={"bad": value})


BYTES_IN_TEXT: dict[str, Callable[[], object]] = {
    "content": lambda: Message(role="user", content=b"bytes"),  # type: ignore[arg-type]
    "name": lambda: Message(role="user", name=b"bytes"),  # type: ignore[arg-type]
    "tool_call_id": lambda: Message(role="tool", tool_call_id=b"c1"),  # type: ignore[arg-type]
    "id": lambda: Message(role="user", id=b"id-1"),  # type: ignore[arg-type]
    "call-id": lambda: ToolCall(id=b"c1", name="f"),  # type: ignore[arg-type]
    "call-name": lambda: ToolCall(id="c1", name=b"f"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("build", list(BYTES_IN_TEXT.values()), ids=list(BYTES_IN_TEXT))
def test_text_fields_refuse_bytes(build: Callable[[], object]) -> None:
    """Bytes in a text field are refused, not decoded: what is stored is what was given."""
    with pytest.raises(ValidationError, match="valid string"):
        build()


def test_json_data_is_kept_as_given() -> None:
    """Every JSON type survives construction unchanged, big integers and unicode included."""
    data = {"s": "é ✓ 😀", "i": 2**80, "f": -0.5, "t": True, "n": None, "l": [1, [2, {"k": []}]]}
    message = Message.user("u", metadata=data)
    assert message.metadata == data
    assert type(message.metadata["t"]) is bool


def test_from_openai_refuses_nan_arguments() -> None:
    """Arguments the model wrote as NaN (json.loads accepts it) are refused, not stored as null."""
    with pytest.raises(ValueError, match="finite"):
        ToolCall.from_openai({"id": "c", "function": {"name": "f", "arguments": '{"x": NaN}'}})
