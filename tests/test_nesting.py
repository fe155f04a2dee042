"""Nesting: writes refuse what reads could not parse, and parsing a caller's JSON refuses what
writes would, with one limit, ``models.MAX_NESTING``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pydantic
import pydantic_core
import pytest
import redis
from anthropic.types import Message as AnthropicMessage
from openai.types.chat import ChatCompletion
from openai.types.responses import ResponseFunctionToolCall
from pydantic import ValidationError
from test_bad_input import dump, seeded

from redis_history import InvalidMessageError, Message, RedisHistory, ToolCall
from redis_history.context import parse, parse_response
from redis_history.models import MAX_NESTING, parse_json
from redis_history.store.codec import ENVELOPE_NESTING, decode_entries


def nested(depth: int) -> dict[str, Any]:
    """A JSON object nested exactly ``depth`` levels, arrays and objects alternating."""
    value: Any = 1.5
    for level in range(depth - 1):
        value = [value, "x"] if level % 2 == 0 else {"k": value}
    return {"top": value}


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


def parser_limit() -> int:
    """The deepest JSON document pydantic-core's parser accepts (arrays nested in arrays)."""
    depth = 1
    while depth < 10_000:
        try:
            pydantic_core.from_json("[" * (depth + 1) + "]" * (depth + 1))
        except ValueError:
            return depth
        depth += 1
    raise AssertionError("no nesting limit found")


def test_the_limit_leaves_a_margin_under_the_installed_parser() -> None:
    """MAX_NESTING plus the envelope's levels stays well under the parser's real limit (200
    with pydantic 2.14 / pydantic-core 2.50), measured on whatever version is installed."""
    limit = parser_limit()
    versions = f"pydantic {pydantic.VERSION}, pydantic-core {pydantic_core.__version__}"
    margin = limit - (MAX_NESTING + ENVELOPE_NESTING)
    assert margin >= 32, f"parser limit {limit} ({versions}) leaves {margin} levels"
    assert depth_of(nested(MAX_NESTING)) == MAX_NESTING


def turn(field: str, value: dict[str, Any]) -> tuple[list[Message], int]:
    """A conversation carrying ``value`` in ``field``, and a length to truncate to at which
    the truncate script must decode the message that carries it."""
    if field == "metadata":
        carrier = Message.assistant("a", metadata=value)
        return [Message.user("q"), carrier, Message.user("more")], 2
    call = ToolCall(id="c1", name="f", arguments=value)
    messages = [
        Message.user("q"),
        Message.assistant("", tool_calls=[call]),
        Message.tool("r", tool_call_id="c1"),
        Message.assistant("done"),
    ]
    return messages, 3


@pytest.mark.parametrize("field", ["metadata", "arguments"])
def test_nesting_at_the_limit_round_trips(client: redis.Redis, field: str) -> None:
    """A value nested exactly MAX_NESTING levels is stored, read back equal, decoded by the
    truncate and fenced splice scripts, and archived readable."""
    messages, keep = turn(field, nested(MAX_NESTING))
    history = RedisHistory(client, "deep", token_counter="heuristic")
    history.append_many(messages)
    assert history.snapshot() == messages
    assert history.tail(1) == messages[-1:]

    assert history.truncate(keep) == 1
    assert history.snapshot() == messages[:keep]
    ids = [m.id for m in messages[:keep]]
    assert history.splice_prefix(keep, Message.system("summary"), expected_ids=ids) == keep
    archived = decode_entries(client.lrange(history.keys.archive, 0, -1))
    assert [entry.message for entry in archived][-keep:] == messages[:keep]


TOO_DEEP = [MAX_NESTING + 1, 196, 255, 300]
"""One level too deep; the 196 to 255 levels that used to be stored and then failed every
read; and past pydantic's own recursion limits."""


@pytest.mark.parametrize("depth", TOO_DEEP)
def test_one_level_deeper_is_refused_when_built(depth: int) -> None:
    """Metadata or arguments nested deeper than MAX_NESTING raise ValidationError naming the
    field and the limit."""
    with pytest.raises(ValidationError, match=r"metadata\n.*deeper than MAX_NESTING = 128"):
        Message.user("u", metadata=nested(depth))
    with pytest.raises(ValidationError, match=r"arguments\n.*deeper than MAX_NESTING = 128"):
        ToolCall(id="c1", name="f", arguments=nested(depth))


@pytest.mark.parametrize("depth", TOO_DEEP)
@pytest.mark.parametrize("field", ["metadata", "arguments"])
def test_too_deep_after_construction_is_refused_when_written(
    client: redis.Redis, field: str, depth: int
) -> None:
    """A value made too deep after validation raises InvalidMessageError with its field and
    index instead of leaving a conversation no read can parse; nothing is written."""
    history = seeded(client)
    messages, _ = turn(field, {})
    carrier = messages[1]
    target = carrier.metadata if field == "metadata" else carrier.tool_calls[0].arguments
    target.update(nested(depth))
    before = dump(client)
    with pytest.raises(InvalidMessageError, match=f"{field} nests deeper than MAX_NESTING") as info:
        history.replace(messages)
    assert info.value.index == 1
    assert dump(client) == before
    assert len(history.snapshot()) == 3


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 190])
def test_too_deep_json_input_is_refused_when_written(client: redis.Redis, depth: int) -> None:
    """A message validated from JSON, where only the parser bounds the nesting, is refused
    when written if it nests deeper than MAX_NESTING; nothing is written."""
    history = seeded(client)
    fields = {"role": "tool", "content": "r", "tool_call_id": "c1", "metadata": nested(depth)}
    message = Message.model_validate_json(json.dumps(fields))
    assert depth_of(message.metadata) == depth
    before = dump(client)
    with pytest.raises(InvalidMessageError, match="metadata nests deeper than MAX_NESTING"):
        history.append(message)
    assert dump(client) == before


def test_many_brackets_but_shallow_is_accepted(client: redis.Redis) -> None:
    """Brackets in text and wide, shallow structures are not mistaken for deep nesting."""
    history = RedisHistory(client, "wide", token_counter="heuristic")
    wide = {"rows": [{"id": i, "tags": [i, [i]]} for i in range(300)]}
    messages = [Message.user("[" * 500 + "{" * 500, metadata=wide), Message.assistant("ok")]
    history.append_many(messages)
    assert history.snapshot() == messages


# --- JSON a caller gives: tool-call arguments in every wire format -------------------------

SHAPES = ["arrays", "objects", "mixed"]
LEVELS = {"arrays": ("[", "]"), "objects": ('{"k":', "}")}


def deep_text(depth: int, shape: str) -> str:
    """A JSON object nested exactly ``depth`` levels below and including itself, built as
    text (``json.dumps`` recurses too): arrays, objects, or the two alternating."""
    kinds = ["objects"] + [shape if shape != "mixed" else SHAPES[i % 2] for i in range(1, depth)]
    opens = "".join(LEVELS[kind][0] for kind in kinds)
    return opens + "1" + "".join(LEVELS[kind][1] for kind in reversed(kinds))


def deep_value(depth: int, shape: str) -> dict[str, Any]:
    """``deep_text(depth, shape)`` as Python data, built without recursion."""
    value: Any = 1
    for i in range(depth - 1, 0, -1):
        kind = shape if shape != "mixed" else SHAPES[i % 2]
        value = [value] if kind == "arrays" else {"k": value}
    return {"k": value}


def chat_message(arguments: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def chat_completion(arguments: str) -> ChatCompletion:
    choice = {"index": 0, "finish_reason": "tool_calls", "message": chat_message(arguments)}
    return ChatCompletion.model_validate(
        {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    )


def function_call(arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments}


def anthropic_reply(arguments: str) -> dict[str, Any]:
    """An Anthropic reply whose tool_use input is the object ``arguments`` spells."""
    depth, shape = TEXTS[arguments]
    block = {"type": "tool_use", "id": "c1", "name": "f", "input": deep_value(depth, shape)}
    return {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [block],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


ENTRY_POINTS: dict[str, Callable[[str], Message]] = {
    "Message.from_openai": lambda a: Message.from_openai(chat_message(a)),
    "openai_chat": lambda a: parse_response(
        {"choices": [{"message": chat_message(a)}]}, "openai_chat"
    ),
    "openai_chat-sdk": lambda a: parse_response(chat_completion(a), "openai_chat"),
    "openai_chat-request": lambda a: parse([chat_message(a)], "openai_chat")[0],
    "openai_responses": lambda a: parse_response(
        {"output": [function_call(a)]}, "openai_responses"
    ),
    "openai_responses-sdk": lambda a: parse_response(
        [ResponseFunctionToolCall.model_validate(function_call(a))], "openai_responses"
    ),
    "openai_responses-request": lambda a: parse([function_call(a)], "openai_responses")[0],
    "anthropic": lambda a: parse_response(anthropic_reply(a), "anthropic"),
    "anthropic-sdk": lambda a: parse_response(
        AnthropicMessage.model_validate(anthropic_reply(a)), "anthropic"
    ),
}
"""Each place a caller's tool-call arguments are parsed into a message (Anthropic's are
objects, not text: the same nesting, as data)."""

PARSER_LIMIT = 100_000
TEXTS: dict[str, tuple[int, str]] = {
    deep_text(depth, shape): (depth, shape)
    for depth in (MAX_NESTING, MAX_NESTING + 1, 150, PARSER_LIMIT)
    for shape in SHAPES
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_arguments_nested_to_the_limit_are_parsed(entry: str, shape: str) -> None:
    """Arguments nested exactly MAX_NESTING levels parse into the call, as the parser reads
    them, in every format."""
    text = deep_text(MAX_NESTING, shape)
    (call,) = ENTRY_POINTS[entry](text).tool_calls
    assert call.arguments == pydantic_core.from_json(text) == deep_value(MAX_NESTING, shape)
    assert depth_of(call.arguments) == MAX_NESTING


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 150, PARSER_LIMIT])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_arguments_nested_deeper_are_refused_naming_the_field(
    entry: str, shape: str, depth: int
) -> None:
    """One level deeper, past pydantic's parser limit, or 100,000 levels (where json.loads
    raised RecursionError): a ValueError naming the arguments and MAX_NESTING, in every format
    (InvalidMessageError where arguments are JSON text)."""
    expected = ValueError if entry.startswith("anthropic") else InvalidMessageError
    with pytest.raises(expected, match=r"(arguments|input)\b[\s\S]*MAX_NESTING = 128"):
        ENTRY_POINTS[entry](deep_text(depth, shape))


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if not e.startswith("anthropic")])
def test_unclosed_brackets_past_the_parsers_limit_are_refused(entry: str) -> None:
    """``"[" * 100000`` as arguments: InvalidMessageError naming the call, not RecursionError."""
    with pytest.raises(InvalidMessageError, match="tool call 'c1' arguments nests deeper"):
        ENTRY_POINTS[entry]("[" * PARSER_LIMIT)


def test_parse_json_holds_any_value_to_the_limit() -> None:
    """The one helper: a value at the limit parses, deeper raises naming the field, text that
    is not JSON raises (or gives None when lenient, where too deep still raises)."""
    assert parse_json("[" * MAX_NESTING + "]" * MAX_NESTING, "x") == pydantic_core.from_json(
        "[" * MAX_NESTING + "]" * MAX_NESTING
    )
    for text in ("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1), "[" * PARSER_LIMIT):
        for lenient in (False, True):
            with pytest.raises(InvalidMessageError, match=r"^x nests deeper than MAX_NESTING"):
                parse_json(text, "x", lenient=lenient)
    with pytest.raises(InvalidMessageError, match=r"^x is not JSON"):
        parse_json('{"a": ', "x")
    assert parse_json('{"a": ', "x", lenient=True) is None
