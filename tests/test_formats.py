"""Requests in every wire format: rendering, parsing requests and replies, round trips, the SDKs'
own types, and ``into_request`` on every backend."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fakeredis
import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses import Response
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import BaseModel, TypeAdapter

from redis_history import AsyncRedisHistory, Message, ToolCall
from redis_history.context import (
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
from redis_history.parts import ImagePart
from redis_history.roles import RoleState

# --- real payload shapes -----------------------------------------------------------------

CHAT_COMPLETION_PARALLEL_CALLS: dict[str, Any] = {
    "id": "chatcmpl-AkL3nC8mGm1ZzSbVYbJz0eHwqQ8o1",
    "object": "chat.completion",
    "created": 1735290000,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_7qYv1YQXhS0mOzG2Y5yq7ZkA",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
                    },
                    {
                        "id": "call_Vz9m3Jm0vJYbFq5xF2bJtXlq",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city": "Porto", "unit": "celsius"}',
                        },
                    },
                ],
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 82, "completion_tokens": 51, "total_tokens": 133},
    "system_fingerprint": "fp_f9f4fb6dbf",
}

CHAT_COMPLETION_REFUSAL: dict[str, Any] = {
    "id": "chatcmpl-B0refusal",
    "object": "chat.completion",
    "created": 1735290001,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": "I'm sorry, I can't help with that.",
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
}

CHAT_REQUEST_MULTIPART: list[dict[str, Any]] = [
    {"role": "developer", "content": [{"type": "text", "text": "Answer briefly."}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare these: "},
            {"type": "text", "text": "Lisbon and Porto."},
        ],
        "name": "ana",
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "19 C"}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "error: upstream timed out"},
    {"role": "assistant", "content": "Porto is 19 C; Lisbon's forecast is unavailable."},
]

RESPONSES_OUTPUT_CALLS: dict[str, Any] = {
    "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "model": "o4-mini-2025-04-16",
    "output": [
        {
            "id": "rs_67ccd2c0b6c08190b2f7c4a5e4b1f7a10bb6a6b452d3795b",
            "type": "reasoning",
            "summary": [],
            "encrypted_content": "gAAAAABoz1Xv",
        },
        {
            "id": "fc_67ccd2c2aa0c8190a8f1a4b8c5e9d3a60bb6a6b452d3795b",
            "type": "function_call",
            "call_id": "call_12xmoMXlgWblnoi1T6ph0bqH",
            "name": "get_weather",
            "arguments": '{"location":"Paris, France"}',
            "status": "completed",
        },
        {
            "id": "fc_67ccd2c2bb0c8190a8f1a4b8c5e9d3a60bb6a6b452d3795b",
            "type": "function_call",
            "call_id": "call_Qr8q2d2l8S2mH5OQnq4uTdDp",
            "name": "get_weather",
            "arguments": '{"location":"Bogotá, Colombia"}',
            "status": "completed",
        },
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}

RESPONSES_OUTPUT_TEXT: dict[str, Any] = {
    "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41",
    "object": "response",
    "created_at": 1741476777,
    "status": "completed",
    "model": "gpt-4o-2024-08-06",
    "output": [
        {
            "type": "message",
            "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41",
            "status": "completed",
            "role": "assistant",
            "content": [
                {
                    "type": "output_text",
                    "text": "Paris is 14 C and cloudy; ",
                    "annotations": [],
                },
                {"type": "output_text", "text": "Bogotá is 18 C.", "annotations": []},
            ],
        }
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}

RESPONSES_INPUT: list[dict[str, Any]] = [
    {"role": "developer", "content": "Answer briefly."},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Weather in Paris and Bogotá?"}],
    },
    *RESPONSES_OUTPUT_CALLS["output"],
    {
        "type": "function_call_output",
        "call_id": "call_12xmoMXlgWblnoi1T6ph0bqH",
        "output": '{"temp_c": 14}',
    },
    {
        "type": "function_call_output",
        "call_id": "call_Qr8q2d2l8S2mH5OQnq4uTdDp",
        "output": [{"type": "input_text", "text": "error: no station"}],
    },
]

ANTHROPIC_TOOL_USE: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {
            "type": "thinking",
            "thinking": "The user wants the weather in two cities; call the tool twice.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
        },
        {"type": "text", "text": "I'll check both cities."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "celsius"},
        },
        {
            "type": "tool_use",
            "id": "toolu_01B19r01rx01mr028946mr0",
            "name": "get_weather",
            "input": {"location": "New York, NY"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 2095, "output_tokens": 503},
}

ANTHROPIC_REQUEST: dict[str, Any] = {
    "system": "You are a weather bot.",
    "messages": [
        {"role": "user", "content": "Weather in SF and NYC?"},
        {"role": "assistant", "content": ANTHROPIC_TOOL_USE["content"][1:]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": [{"type": "text", "text": "15 degrees"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01B19r01rx01mr028946mr0",
                    "content": "ConnectionError: the weather service API is not available",
                    "is_error": True,
                },
                {"type": "text", "text": "Also, is it windy?"},
            ],
        },
    ],
}


def conversation() -> list[Message]:
    """A summary, then a turn with parallel calls (one failing), then a plain turn."""
    calls = [
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Lisbon"}),
        ToolCall(id="call_b", name="get_weather", arguments={"city": "東京", "days": [1, 2]}),
    ]
    return [
        Message.system("Summary of earlier turns: the user plans a trip."),
        Message.user("Weather in Lisbon and Tokyo?"),
        Message.assistant("Checking both.", tool_calls=calls),
        Message.tool('{"temp_c": 21}', tool_call_id="call_a"),
        Message.tool("error: timeout", tool_call_id="call_b", metadata={IS_ERROR: True}),
        Message.assistant("Lisbon is 21 °C; Tokyo's forecast failed."),
        Message.user("Thanks 🙏"),
        Message.assistant("You're welcome."),
    ]


def shape(message: Message) -> tuple[Any, ...]:
    """What every format carries: role, text, tool calls, the id a result answers."""
    calls = tuple((c.id, c.name, c.arguments) for c in message.tool_calls)
    return (message.role, message.content, calls, message.tool_call_id)


def carried(messages: Sequence[Message], format: WireFormat) -> list[tuple[Any, ...]]:
    """The part of ``messages`` that ``format`` carries, as the module docstring states it."""
    out = []
    for m in messages:
        if format == "anthropic" and m.role == "system" and not m.content:
            continue  # the API refuses empty text blocks: left out
        name = m.name if format == "openai_chat" and m.role != "tool" else None
        error = format == "anthropic" and m.metadata.get(IS_ERROR) is True
        out.append((*shape(m), name, error))
    return out


# --- rendering ---------------------------------------------------------------------------


def test_openai_chat_puts_the_prompt_first_and_each_message_as_to_openai_writes_it() -> None:
    """Chat completions: the system prompt, then every message in its own chat format."""
    messages = conversation()
    request = render(messages, "openai_chat", system_prompt="You are a travel agent.")
    assert request == {
        "messages": [
            {"role": "system", "content": "You are a travel agent."},
            *(m.to_openai() for m in messages),
        ]
    }


def test_openai_responses_items_calls_and_outputs() -> None:
    """Responses: instructions, message items, one function_call item per call after its text,
    one function_call_output per result."""
    request = render(conversation(), "openai_responses", system_prompt="Be brief.")
    assert request["instructions"] == "Be brief."
    assert [item["type"] for item in request["input"]] == [
        "message",
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
        "message",
        "message",
    ]
    assert request["input"][0] == {
        "type": "message",
        "role": "system",
        "content": "Summary of earlier turns: the user plans a trip.",
    }
    assert request["input"][4] == {
        "type": "function_call",
        "call_id": "call_b",
        "name": "get_weather",
        "arguments": '{"city": "東京", "days": [1, 2]}',
    }
    assert request["input"][6] == {
        "type": "function_call_output",
        "call_id": "call_b",
        "output": "error: timeout",
    }


def test_openai_responses_without_prompt_has_no_instructions() -> None:
    """No system prompt, no ``instructions`` key; an assistant with only calls has no message."""
    request = render(conversation()[1:4], "openai_responses")
    assert set(request) == {"input"}
    assert [i["type"] for i in request["input"]] == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
    ]
    only_calls = render(
        [Message.assistant("", tool_calls=[ToolCall(id="c", name="f")])], "openai_responses"
    )
    assert [i["type"] for i in only_calls["input"]] == ["function_call"]


def test_anthropic_system_separate_tool_blocks_and_merged_results() -> None:
    """Anthropic: prompt then summary as system blocks; text then tool_use blocks; both
    results, error flagged, in one user turn."""
    request = render(conversation(), "anthropic", system_prompt="You are a travel agent.")
    assert request["system"] == [
        {"type": "text", "text": "You are a travel agent."},
        {"type": "text", "text": "Summary of earlier turns: the user plans a trip."},
    ]
    turns = request["messages"]
    assert [t["role"] for t in turns] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert turns[1]["content"] == [
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Lisbon"}},
        {
            "type": "tool_use",
            "id": "call_b",
            "name": "get_weather",
            "input": {"city": "東京", "days": [1, 2]},
        },
    ]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_a", "content": '{"temp_c": 21}'},
        {
            "type": "tool_result",
            "tool_use_id": "call_b",
            "content": "error: timeout",
            "is_error": True,
        },
    ]


def test_anthropic_merges_a_user_message_after_tool_results_into_their_turn() -> None:
    """A user message right after tool results (an unvalidated history) joins their turn, and
    two user messages in a row make one turn: user and assistant still alternate."""
    messages = [
        Message.user("a"),
        Message.user("b"),
        Message.assistant("", tool_calls=[ToolCall(id="c1", name="f")]),
        Message.tool("r", tool_call_id="c1"),
        Message.user("and then?"),
    ]
    turns = render(messages, "anthropic")["messages"]
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "r"},
                {"type": "text", "text": "and then?"},
            ],
        },
    ]
    assert [shape(m) for m in parse({"messages": turns}, "anthropic")] == [
        ("user", "ab", (), None),
        ("assistant", "", (("c1", "f", {}),), None),
        ("tool", "r", (), "c1"),
        ("user", "and then?", (), None),
    ]


def test_anthropic_without_any_system_text_has_no_system_key() -> None:
    """No prompt and no system message: no ``system`` key; empty system texts are left out."""
    assert set(render([Message.user("hi")], "anthropic")) == {"messages"}
    assert set(render([Message.system(""), Message.user("hi")], "anthropic", "")) == {"messages"}


def test_summaries_render_in_every_format() -> None:
    """A compaction summary (a system message) reaches the model in each format, after the
    prompt: a chat system message, a Responses system item, an Anthropic system block."""
    summary = Message.system("Summary: the user is Ana.")
    messages = [summary, Message.user("Who am I?")]
    chat = render(messages, "openai_chat", "P")["messages"]
    assert chat[:2] == [{"role": "system", "content": "P"}, summary.to_openai()]
    responses = render(messages, "openai_responses", "P")
    assert responses["input"][0] == {
        "type": "message",
        "role": "system",
        "content": summary.content,
    }
    anthropic = render(messages, "anthropic", "P")
    assert [b["text"] for b in anthropic["system"]] == ["P", summary.content]
    assert anthropic["messages"][0]["role"] == "user"


def test_unknown_format_is_refused() -> None:
    """A format that is not a WireFormat raises ValueError naming the known ones."""
    with pytest.raises(ValueError, match="openai_chat, openai_responses, anthropic"):
        render([], "gemini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown wire format"):
        parse([], "gemini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown wire format"):
        parse_response({}, "gemini")  # type: ignore[arg-type]


# --- parsing replies ---------------------------------------------------------------------


def test_chat_completion_with_parallel_calls_parses_to_one_assistant_message() -> None:
    """choices[0].message: both calls, ids kept, arguments decoded; the dict and the SDK's
    ChatCompletion give the same message."""
    reply = parse_response(CHAT_COMPLETION_PARALLEL_CALLS, "openai_chat")
    assert shape(reply) == (
        "assistant",
        "",
        (
            ("call_7qYv1YQXhS0mOzG2Y5yq7ZkA", "get_weather", {"city": "Lisbon"}),
            ("call_Vz9m3Jm0vJYbFq5xF2bJtXlq", "get_weather", {"city": "Porto", "unit": "celsius"}),
        ),
        None,
    )
    sdk = ChatCompletion.model_validate(CHAT_COMPLETION_PARALLEL_CALLS)
    assert shape(parse_response(sdk, "openai_chat")) == shape(reply)
    assert shape(parse_response(sdk.choices[0].message, "openai_chat")) == shape(reply)


def test_chat_refusal_is_kept_as_text_and_flagged() -> None:
    """A refusal becomes the message's text with ``metadata["refusal"]``."""
    reply = parse_response(CHAT_COMPLETION_REFUSAL, "openai_chat")
    assert reply.content == "I'm sorry, I can't help with that."
    assert reply.metadata == {REFUSAL: True}


def test_chat_reply_with_audio_or_custom_tool_is_refused() -> None:
    """What a message cannot carry raises instead of being dropped."""
    audio = copy.deepcopy(CHAT_COMPLETION_REFUSAL)
    audio["choices"][0]["message"]["audio"] = {"id": "a", "data": "UklGR", "transcript": "hi"}
    with pytest.raises(ValueError, match="audio"):
        parse_response(audio, "openai_chat")
    custom = copy.deepcopy(CHAT_COMPLETION_PARALLEL_CALLS)
    custom["choices"][0]["message"]["tool_calls"][0] = {
        "id": "call_x",
        "type": "custom",
        "custom": {"name": "shell", "input": "ls"},
    }
    with pytest.raises(ValueError, match="'custom' is not supported"):
        parse_response(custom, "openai_chat")


def test_chat_arguments_that_are_not_json_are_refused() -> None:
    """A call whose arguments are not a JSON object raises ValueError naming the call."""
    bad = copy.deepcopy(CHAT_COMPLETION_PARALLEL_CALLS)
    bad["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": '
    with pytest.raises(ValueError, match="call_7qYv1YQXhS0mOzG2Y5yq7ZkA"):
        parse_response(bad, "openai_chat")


def test_responses_output_with_reasoning_and_parallel_calls() -> None:
    """Responses output: the two function_call items become one message's calls (call ids, not
    item ids), the reasoning item is kept and sent back before them in this format only."""
    reply = parse_response(RESPONSES_OUTPUT_CALLS, "openai_responses")
    assert shape(reply) == (
        "assistant",
        "",
        (
            ("call_12xmoMXlgWblnoi1T6ph0bqH", "get_weather", {"location": "Paris, France"}),
            ("call_Qr8q2d2l8S2mH5OQnq4uTdDp", "get_weather", {"location": "Bogotá, Colombia"}),
        ),
        None,
    )
    assert reply.metadata == {OPENAI_REASONING: [RESPONSES_OUTPUT_CALLS["output"][0]]}
    sdk = Response.model_validate(RESPONSES_OUTPUT_CALLS)
    assert parse_response(sdk, "openai_responses").metadata == reply.metadata
    items = render([Message.user("q"), reply], "openai_responses")["input"]
    assert [i["type"] for i in items] == ["message", "reasoning", "function_call", "function_call"]
    assert items[1] == RESPONSES_OUTPUT_CALLS["output"][0]
    for format in ("openai_chat", "anthropic"):
        assert "reasoning" not in json.dumps(render([Message.user("q"), reply], format))


def test_responses_output_text_parts_are_joined() -> None:
    """A message item's output_text parts join into one text; the SDK object agrees."""
    reply = parse_response(RESPONSES_OUTPUT_TEXT, "openai_responses")
    assert shape(reply) == ("assistant", "Paris is 14 C and cloudy; Bogotá is 18 C.", (), None)
    sdk = Response.model_validate(RESPONSES_OUTPUT_TEXT)
    assert reply.content == sdk.output_text
    assert shape(parse_response(sdk, "openai_responses")) == shape(reply)
    assert shape(parse_response(sdk.output, "openai_responses")) == shape(reply)


def test_responses_refusal_and_unsupported_items() -> None:
    """A refusal part is flagged text; a web search call, or an image in a reply, raises; an
    image in a user's input is kept as a part and rendered back as it came."""
    refused = copy.deepcopy(RESPONSES_OUTPUT_TEXT)
    refused["output"][0]["content"] = [{"type": "refusal", "refusal": "I can't help."}]
    reply = parse_response(refused, "openai_responses")
    assert (reply.content, reply.metadata) == ("I can't help.", {REFUSAL: True})
    search = {"output": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]}
    with pytest.raises(ValueError, match="'web_search_call' is not supported"):
        parse_response(search, "openai_responses")
    image = {"type": "input_image", "image_url": "https://x/y.png", "detail": "high"}
    drawn = {"output": [{"type": "message", "role": "assistant", "content": [image]}]}
    with pytest.raises(ValueError, match=r"an assistant message holds text only, not \[image"):
        parse_response(drawn, "openai_responses")
    asked = [{"type": "message", "role": "user", "content": [image]}]
    (message,) = parse(asked, "openai_responses")
    assert message.parts == (ImagePart(url="https://x/y.png", detail="high"),)
    assert render([message], "openai_responses")["input"] == asked


def test_empty_responses_output_is_an_empty_assistant_message() -> None:
    """A reply with no output items parses to an empty assistant message."""
    assert shape(parse_response({"output": []}, "openai_responses")) == ("assistant", "", (), None)


def test_anthropic_reply_with_thinking_text_and_tool_use() -> None:
    """Anthropic content blocks: text, both tool_use calls with their ids and inputs, the
    thinking block kept and sent back first in the assistant turn."""
    reply = parse_response(ANTHROPIC_TOOL_USE, "anthropic")
    assert shape(reply) == (
        "assistant",
        "I'll check both cities.",
        (
            (
                "toolu_01A09q90qw90lq917835lq9",
                "get_weather",
                {"location": "San Francisco, CA", "unit": "celsius"},
            ),
            ("toolu_01B19r01rx01mr028946mr0", "get_weather", {"location": "New York, NY"}),
        ),
        None,
    )
    assert reply.metadata == {ANTHROPIC_THINKING: [ANTHROPIC_TOOL_USE["content"][0]]}
    sdk = AnthropicMessage.model_validate(ANTHROPIC_TOOL_USE)
    sdk_reply = parse_response(sdk, "anthropic")
    assert (shape(sdk_reply), sdk_reply.metadata) == (shape(reply), reply.metadata)
    turns = render([Message.user("q"), reply], "anthropic")["messages"]
    assert turns[1]["content"] == ANTHROPIC_TOOL_USE["content"]


def test_anthropic_reply_with_a_server_tool_or_from_the_user_is_refused() -> None:
    """Blocks a message cannot carry, and a reply that is not the assistant's, raise."""
    server = copy.deepcopy(ANTHROPIC_TOOL_USE)
    server["content"].append(
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    )
    with pytest.raises(ValueError, match="'server_tool_use' is not supported"):
        parse_response(server, "anthropic")
    with pytest.raises(ValueError, match="role assistant"):
        parse_response({"role": "user", "content": "hi"}, "anthropic")


# --- parsing requests --------------------------------------------------------------------


def test_chat_request_with_multipart_content_and_a_failed_tool() -> None:
    """Developer becomes system, text parts join, results keep their order and call ids."""
    messages = parse(CHAT_REQUEST_MULTIPART, "openai_chat")
    assert [shape(m) for m in messages] == [
        ("system", "Answer briefly.", (), None),
        ("user", "Compare these: Lisbon and Porto.", (), None),
        (
            "assistant",
            "",
            (
                ("call_1", "get_weather", {"city": "Lisbon"}),
                ("call_2", "get_weather", {"city": "Porto"}),
            ),
            None,
        ),
        ("tool", "19 C", (), "call_2"),
        ("tool", "error: upstream timed out", (), "call_1"),
        ("assistant", "Porto is 19 C; Lisbon's forecast is unavailable.", (), None),
    ]
    assert messages[1].name == "ana"
    RoleState().advance_all(messages[1:])  # a history accepts them
    wrapped = parse({"messages": CHAT_REQUEST_MULTIPART}, "openai_chat")
    assert [shape(m) for m in wrapped] == [shape(m) for m in messages]


def test_a_chat_request_with_an_image_keeps_it() -> None:
    """An image part is kept as an ``ImagePart`` and rendered back as it came."""
    image = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        }
    ]
    (message,) = parse(image, "openai_chat")
    assert message.text == "What is this?"
    assert [part.type for part in message.parts] == ["text", "image"]
    assert render([message], "openai_chat")["messages"] == image


def test_responses_input_items_parse_to_a_well_formed_history() -> None:
    """Responses input: developer → system, calls grouped after the reasoning item, outputs
    (string or parts) as tool messages."""
    messages = parse(RESPONSES_INPUT, "openai_responses")
    assert [shape(m) for m in messages] == [
        ("system", "Answer briefly.", (), None),
        ("user", "Weather in Paris and Bogotá?", (), None),
        (
            "assistant",
            "",
            (
                ("call_12xmoMXlgWblnoi1T6ph0bqH", "get_weather", {"location": "Paris, France"}),
                ("call_Qr8q2d2l8S2mH5OQnq4uTdDp", "get_weather", {"location": "Bogotá, Colombia"}),
            ),
            None,
        ),
        ("tool", '{"temp_c": 14}', (), "call_12xmoMXlgWblnoi1T6ph0bqH"),
        ("tool", "error: no station", (), "call_Qr8q2d2l8S2mH5OQnq4uTdDp"),
    ]
    RoleState().advance_all(messages)


def test_responses_string_input_is_one_user_message() -> None:
    """``input`` given as a string is one user message after the instructions."""
    messages = parse({"instructions": "Be brief.", "input": "Hi"}, "openai_responses")
    assert [shape(m) for m in messages] == [
        ("system", "Be brief.", (), None),
        ("user", "Hi", (), None),
    ]


def test_anthropic_request_splits_a_user_turn_into_results_then_text() -> None:
    """Each tool_result becomes a tool message in order (is_error kept in metadata), and the
    text after them a user message."""
    messages = parse(ANTHROPIC_REQUEST, "anthropic")
    assert [shape(m) for m in messages] == [
        ("system", "You are a weather bot.", (), None),
        ("user", "Weather in SF and NYC?", (), None),
        (
            "assistant",
            "I'll check both cities.",
            (
                (
                    "toolu_01A09q90qw90lq917835lq9",
                    "get_weather",
                    {"location": "San Francisco, CA", "unit": "celsius"},
                ),
                ("toolu_01B19r01rx01mr028946mr0", "get_weather", {"location": "New York, NY"}),
            ),
            None,
        ),
        ("tool", "15 degrees", (), "toolu_01A09q90qw90lq917835lq9"),
        (
            "tool",
            "ConnectionError: the weather service API is not available",
            (),
            "toolu_01B19r01rx01mr028946mr0",
        ),
        ("user", "Also, is it windy?", (), None),
    ]
    assert [m.metadata for m in messages[3:5]] == [{}, {IS_ERROR: True}]
    rendered = render(messages, "anthropic")
    assert rendered["messages"][1:] == [
        ANTHROPIC_REQUEST["messages"][1],
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": "15 degrees",
                },
                ANTHROPIC_REQUEST["messages"][2]["content"][1],
                ANTHROPIC_REQUEST["messages"][2]["content"][2],
            ],
        },
    ]


def test_anthropic_request_with_system_blocks_or_an_image_block() -> None:
    """``system`` as text blocks gives one system message each; an image block is kept as a
    part and rendered back as it came; a block no part holds raises."""
    system = [
        {"type": "text", "text": "A"},
        {"type": "text", "text": "B", "cache_control": {"type": "ephemeral"}},
    ]
    messages = parse({"system": system, "messages": []}, "anthropic")
    assert [shape(m) for m in messages] == [("system", "A", (), None), ("system", "B", (), None)]
    png = b"\x89PNG\r\n\x1a\n"
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    turn = [{"role": "user", "content": [image]}]
    (message,) = parse(turn, "anthropic")
    assert message.parts == (ImagePart(data=png, media_type="image/png"),)
    assert render([message], "anthropic")["messages"] == turn
    search = {"type": "search_result", "source": "https://x", "title": "x", "content": []}
    with pytest.raises(ValueError, match="'search_result' is not supported"):
        parse([{"role": "user", "content": [search]}], "anthropic")


# --- round trips -------------------------------------------------------------------------

TEXTS = st.text(max_size=30)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3)
NAMES = st.none() | st.sampled_from(["ana", "bob"])


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """A well-formed history: an optional system message (a prompt or a summary), then turns of
    a user message, tool steps (parallel calls answered in any order, some errors) and a reply."""
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message.system(draw(TEXTS)))
    calls_made = 0
    for _ in range(draw(st.integers(0, 3))):
        out.append(Message.user(draw(TEXTS), name=draw(NAMES)))
        for _ in range(draw(st.integers(0, 2))):
            count = draw(st.integers(1, 3))
            calls = [
                ToolCall(
                    id=f"call_{calls_made + i}",
                    name=draw(st.sampled_from(["search", "read_file"])),
                    arguments=draw(ARGUMENTS),
                )
                for i in range(count)
            ]
            calls_made += count
            out.append(Message.assistant(draw(TEXTS), tool_calls=calls, name=draw(NAMES)))
            for call in draw(st.permutations(calls)):
                error = {IS_ERROR: True} if draw(st.booleans()) else {}
                out.append(Message.tool(draw(TEXTS), tool_call_id=call.id, metadata=error))
        out.append(Message.assistant(draw(TEXTS)))
    return out


@pytest.mark.parametrize("format", WIRE_FORMATS)
@settings(max_examples=150, deadline=None)
@given(messages=conversations(), prompt=st.none() | TEXTS)
def test_parse_of_render_gives_back_what_the_format_carries(
    format: WireFormat, messages: list[Message], prompt: str | None
) -> None:
    """parse(render(m)) == m on role, text, calls (ids, decoded arguments), the answered id, and
    what the format keeps besides (chat: names; Anthropic: tool errors); the prompt comes
    back as a leading system message."""
    RoleState().advance_all(messages)  # the strategy makes histories a store accepts
    back = parse(render(messages, format, system_prompt=prompt), format)
    expected = messages if prompt is None else [Message.system(prompt), *messages]
    assert carried(back, format) == carried(expected, format)


@pytest.mark.parametrize("format", WIRE_FORMATS)
@settings(max_examples=100, deadline=None)
@given(messages=conversations())
def test_render_goes_through_json_unchanged(format: WireFormat, messages: list[Message]) -> None:
    """A request is JSON data: what an HTTP client sends is what was rendered."""
    request = render(messages, format, system_prompt="p")
    assert json.loads(json.dumps(request)) == request


ANY_MESSAGE = st.one_of(
    st.builds(Message.system, TEXTS),
    st.builds(Message.user, TEXTS),
    st.builds(
        Message.assistant,
        TEXTS,
        tool_calls=st.lists(st.sampled_from(["c1", "c2", "c3"]), unique=True, max_size=2).map(
            lambda ids: [ToolCall(id=i, name="f") for i in ids]
        ),
    ),
    st.builds(Message.tool, TEXTS, tool_call_id=st.sampled_from(["c1", "c2", "c3"])),
)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(ANY_MESSAGE, max_size=12))
def test_anthropic_turns_alternate_for_any_sequence(messages: list[Message]) -> None:
    """Whatever the order (even one a store would refuse), Anthropic turns alternate strictly,
    hold no system role, and keep every text, call and result in order."""
    request = render(messages, "anthropic")
    roles = [turn["role"] for turn in request["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert set(roles) <= {"user", "assistant"}
    blocks = [block for turn in request["messages"] for block in turn["content"]]
    calls = [c.id for m in messages for c in m.tool_calls]
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == calls
    results = [m.tool_call_id for m in messages if m.role == "tool"]
    assert [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"] == results


# --- the SDKs' own request types ---------------------------------------------------------

CREATE_PARAMS: dict[WireFormat, tuple[TypeAdapter[Any], dict[str, Any]]] = {
    "openai_chat": (TypeAdapter(CompletionCreateParamsNonStreaming), {"model": "gpt-4o"}),
    "openai_responses": (TypeAdapter(ResponseCreateParamsNonStreaming), {"model": "gpt-4o"}),
    "anthropic": (
        TypeAdapter(MessageCreateParamsNonStreaming),
        {"model": "claude-sonnet-4-5", "max_tokens": 1024},
    ),
}


def materialized(value: Any) -> Any:
    """``value`` with every lazily validated iterable read out, so its items are validated.
    Some pydantic versions resolve a block of a union to the SDK's response model (a
    ``BaseModel`` with the same fields) rather than its ``TypedDict``: read back what was set."""
    if isinstance(value, BaseModel):
        return materialized(value.model_dump(exclude_unset=True))
    if isinstance(value, Mapping):
        return {key: materialized(item) for key, item in value.items()}
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, Iterable):
        return [materialized(item) for item in value]
    return value


def sdk_checked(request: dict[str, Any], format: WireFormat) -> dict[str, Any]:
    """The request validated as the SDK's create() parameters (TypedDicts drop unknown keys,
    so equality with the input proves every key is one the SDK knows)."""
    adapter, options = CREATE_PARAMS[format]
    payload = {**options, **request}
    checked: dict[str, Any] = materialized(adapter.validate_python(payload))
    assert checked == payload
    return checked


@pytest.mark.parametrize("format", WIRE_FORMATS)
def test_a_rendered_request_is_the_sdks_create_params(format: WireFormat) -> None:
    """The crafted conversation, rendered, validates as the SDK's create() keyword arguments."""
    sdk_checked(render(conversation(), format, system_prompt="You are a travel agent."), format)


@pytest.mark.parametrize("format", WIRE_FORMATS)
@settings(max_examples=60, deadline=None)
@given(messages=conversations())
def test_every_rendered_history_is_the_sdks_create_params(
    format: WireFormat, messages: list[Message]
) -> None:
    """Any well-formed history renders to parameters the SDK's types accept, key for key."""
    sdk_checked(render(messages, format, system_prompt="p"), format)


def test_replies_kept_with_their_reasoning_still_validate() -> None:
    """Reasoning and thinking sent back are shapes the SDKs accept as input."""
    responses = render(
        [Message.user("q"), parse_response(RESPONSES_OUTPUT_CALLS, "openai_responses")],
        "openai_responses",
    )
    sdk_checked(responses, "openai_responses")
    anthropic = render(
        [Message.user("q"), parse_response(ANTHROPIC_TOOL_USE, "anthropic")], "anthropic"
    )
    sdk_checked(anthropic, "anthropic")


# --- into_request on every backend -------------------------------------------------------


@pytest.mark.parametrize("format", WIRE_FORMATS)
def test_into_request_renders_the_snapshot(history: Any, format: WireFormat) -> None:
    """On every backend, into_request is render of the snapshot; a parsed reply appends."""
    messages = conversation()
    history.append_many(messages[:-1])
    request = into_request(history, "You are a travel agent.", format=format)
    assert request == render(messages[:-1], format, "You are a travel agent.")
    reply = {
        "openai_chat": CHAT_COMPLETION_PARALLEL_CALLS,
        "openai_responses": RESPONSES_OUTPUT_CALLS,
        "anthropic": ANTHROPIC_TOOL_USE,
    }[format]
    answer = parse_response(reply, format)
    history.append(answer)  # what the model returned is what the history accepts
    history.append_many([Message.tool("ok", tool_call_id=c.id) for c in answer.tool_calls])
    assert carried(history.snapshot(), format)[-3:] == carried(
        [answer, *(Message.tool("ok", tool_call_id=c.id) for c in answer.tool_calls)], format
    )


def test_ainto_request_on_an_async_history_is_deprecated_and_renders_the_same() -> None:
    """The asyncio front end renders the same request; ``ainto_request`` still does, with a
    ``DeprecationWarning`` naming the rendering that replaces it."""

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        history = AsyncRedisHistory(fakeredis.FakeAsyncRedis(), "conv")
        await history.append_many(conversation())
        with pytest.warns(DeprecationWarning, match=r"render\(await history.snapshot\(\)"):
            old = await ainto_request(history, "P", format="anthropic")
        return old, render(await history.snapshot(), "anthropic", "P")

    old, new = asyncio.run(run())
    assert old == new == render(conversation(), "anthropic", "P")
