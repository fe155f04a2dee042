"""Nesting: writes refuse what reads could not parse, with one limit, ``codec.MAX_NESTING``."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pydantic_core
import pytest
import redis
from pydantic import ValidationError
from test_bad_input import dump, seeded

from redis_history import InvalidMessageError, Message, RedisHistory, ToolCall
from redis_history.codec import ENVELOPE_NESTING, decode_entries
from redis_history.models import MAX_NESTING


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
