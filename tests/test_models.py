"""Messages: validation on construction and the OpenAI chat-completions wire format."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from redis_history import Message, ToolCall
from redis_history.models import MESSAGES


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
def test_inconsistent_messages_are_refused(fields: dict[str, object]) -> None:
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
    assert tool.to_openai() == {
        "role": "tool",
        "content": "42",
        "name": "search",
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
    """Image parts and non-JSON arguments raise instead of being dropped."""
    with pytest.raises(ValueError, match="image_url"):
        Message.from_openai({"role": "user", "content": [{"type": "image_url", "image_url": {}}]})
    with pytest.raises(ValueError, match="not JSON"):
        ToolCall.from_openai({"id": "c", "function": {"name": "f", "arguments": "{oops"}})


def test_a_list_validates_in_one_call() -> None:
    """The module-level adapter round-trips a whole list."""
    messages = [Message.user("a"), Message.assistant("b")]
    assert MESSAGES.validate_json(MESSAGES.dump_json(messages)) == messages
