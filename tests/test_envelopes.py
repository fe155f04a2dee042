"""Compact envelopes: what is stored, that it reads back equal, that the layout before it
still reads (in Python and in every script), and the chat-completions read."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from samples import turns

from redis_history import (
    CorruptHistoryError,
    InvalidMessageError,
    Message,
    RedisHistory,
    ToolCall,
    ToolPairingError,
)
from redis_history.models import MAX_NESTING
from redis_history.store._stored import stamp
from redis_history.store.codec import (
    _STORED,
    Entry,
    _calls_body,
    _plain_body,
    decode_entries,
    decode_messages,
    decode_openai,
    encode_entry,
    encode_message,
)
from redis_history.tokens import HeuristicCounter

AT = datetime(2026, 11, 23, 13, 18, 14, 17000, tzinfo=UTC)
AT_MS = 1795439894017


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def stored(client: Any, history: RedisHistory) -> list[bytes]:
    return [bytes(item) for item in client.lrange(history.keys.msgs, 0, -1)]


def varied() -> list[Message]:
    """Every field off its default somewhere, and at its default elsewhere."""
    return [
        Message.system("be brief", created_at=AT),
        Message.user("weather in 東京?", name="ana", metadata={"lang": "ja", "n": [1, {"k": 2.5}]}),
        Message.assistant(
            "",
            tool_calls=[
                ToolCall(id="c1", name="weather", arguments={"city": "東京", "days": [1, 2]}),
                ToolCall(id="c2", name="clock"),
            ],
        ),
        Message.tool('{"temp": 21}', tool_call_id="c1", name="weather"),
        Message.tool("", tool_call_id="c2"),
        Message.assistant("21 °C", metadata={"model": "x"}),
        Message.user(""),
        Message.assistant(
            "checking", tool_calls=[ToolCall(id="c3", name="f", arguments={"a": None})]
        ),
        Message.tool("ok", tool_call_id="c3"),
        Message.assistant("done", created_at=datetime(2026, 1, 1, 12, 0, 0, 1, tzinfo=UTC)),
    ]


# -- what is stored --------------------------------------------------------------------------


def test_a_default_message_is_stored_without_its_defaults(client: redis.Redis) -> None:
    """A user "hi" is stored as its token count, id, role, content and an integer
    timestamp: no tool_calls, tool_call_id, name, metadata, x or s."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    message = Message.user("hi", created_at=AT)
    history.append(message)
    [envelope] = stored(client, history)
    tokens = history.entries()[0].tokens
    expected = (
        f'{{"t":{tokens},"m":{{"id":"{message.id}","role":"user","content":"hi","at":{AT_MS}}}}}'
    )
    assert envelope.decode() == expected
    assert history.snapshot() == [message]


def test_flags_are_stored_only_when_set(client: redis.Redis) -> None:
    """An exact count adds "x":1 and a summary "s":1, between t and m; an assistant
    without tool calls or content stores neither."""
    history = RedisHistory(client, "c", token_counter="o200k_base")
    history.append_many([Message.user("q"), Message.assistant("")])
    history.splice_prefix(1, Message.system("summary"))
    summary, reply = stored(client, history)
    assert summary.startswith(b'{"t":')
    assert b',"x":1,"s":1,"m":{"id":"' in summary
    assert b',"x":1,"m":{"id":"' in reply
    assert b'"s"' not in reply
    body = json.loads(reply)["m"]
    assert set(body) == {"id", "role", "at"}
    entries = history.entries()
    assert [(e.exact, e.summary) for e in entries] == [(True, True), (True, False)]


def test_every_field_round_trips(history: Any) -> None:
    """Messages with each field off and at its default read back equal, on every backend,
    and the chat-completions read equals to_openai() of each."""
    messages = varied()
    history.append_many(messages)
    assert history.snapshot() == messages
    assert history.snapshot_openai() == [m.to_openai() for m in messages]
    assert [e.message for e in history.entries()] == messages


def test_snapshot_openai_matches_to_openai_on_a_long_conversation(history: Any) -> None:
    """The chat-completions read of a compacted conversation equals to_openai() of the
    snapshot, summary included."""
    history.append_many(turns(5))
    history.splice_prefix(9, Message.system("summary of two turns"))
    history.append(Message.user("and now?", name="bob"))
    assert history.snapshot_openai() == [m.to_openai() for m in history.snapshot()]
    assert history.snapshot_openai()[0] == {"role": "system", "content": "summary of two turns"}


MOMENTS = {
    "utc, whole ms": (AT, True),
    "utc, microseconds": (datetime(2026, 11, 23, 13, 18, 14, 17001, tzinfo=UTC), False),
    "zero offset, not datetime.UTC": (AT.replace(tzinfo=timezone(timedelta(0), "Z")), True),
    "naive": (datetime(2026, 11, 23, 13, 18, 14, 17000), False),
    "+02:00": (AT.replace(tzinfo=timezone(timedelta(hours=2))), False),
    "before 1970-08-20 (an integer would read as seconds)": (
        datetime(1970, 1, 2, tzinfo=UTC),
        False,
    ),
    "the last ms": (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), True),
}


@pytest.mark.parametrize("case", sorted(MOMENTS))
def test_created_at_reads_back_equal(client: redis.Redis, case: str) -> None:
    """A timestamp is stored as integer ms only where that reads back equal (aware UTC,
    whole ms, after 1970-08-20); otherwise as ISO text, keeping naive naive and the offset."""
    moment, as_integer = MOMENTS[case]
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append(Message.user("hi", created_at=moment))
    stamp = json.loads(stored(client, history)[0])["m"]["at"]
    assert isinstance(stamp, int) is as_integer
    [back] = history.snapshot()
    assert back.created_at == moment
    assert back.created_at.utcoffset() == moment.utcoffset()


def test_a_new_message_is_stamped_to_the_millisecond() -> None:
    """The default created_at is UTC and whole milliseconds, so it is stored as an integer."""
    stamps = [Message.user("x").created_at for _ in range(50)]
    assert all(s.tzinfo is UTC and s.microsecond % 1000 == 0 for s in stamps)
    envelope, _ = encode_message(Message.user("x"), HeuristicCounter(), 1 << 10)
    assert isinstance(json.loads(envelope)["m"]["at"], int)


# -- the layout before compact envelopes -----------------------------------------------------


def test_messages_stored_with_created_at_read_as_they_did(client: redis.Redis) -> None:
    """Messages stored before the timestamp's short name (``"created_at":`` where ``"at":``
    is now) read back equal through every read and script, plain, general and compressed,
    and a conversation holding both forms takes appends and rewrites."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    messages = [*varied(), Message.user("long"), Message.assistant("x" * 5000)]
    history.append_many(messages)
    key = history.keys.msgs
    raw = stored(client, history)
    old = [e.replace(b',"at":', b',"created_at":', 1) for e in raw]
    assert all(b'"created_at":' in e and b'"at":' not in e for e in old)
    assert old[-1].endswith(b"\0")  # the compressed one
    client.delete(key)
    client.rpush(key, *old)
    assert history.snapshot() == messages
    assert history.snapshot_openai() == [m.to_openai() for m in messages]
    assert [e.message for e in history.entries()] == messages
    assert history.token_estimate() == sum(e.tokens for e in history.entries())
    history.append(Message.user("new"))
    assert history.truncate(len(messages)) == 1
    assert history.rollback([messages[-1].id]) == 1
    assert history.snapshot() == messages[:-1]
    history.splice_prefix(6, Message.system("summary"))
    assert history.snapshot()[1:] == messages[6:-1]


def test_a_new_message_id_is_128_random_bits_in_22_url_safe_characters() -> None:
    """The id every stored message carries is short and as unique as a uuid4."""
    ids = {Message.user("x").id for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and re.fullmatch(r"[A-Za-z0-9_-]{22}", i) for i in ids)
    assert len(set().union(*ids)) > 60  # every character of the alphabet turns up


# -- the turn state from compact envelopes ---------------------------------------------------


def test_truncate_and_rollback_decode_assistants_without_tool_calls(client: redis.Redis) -> None:
    """An assistant stored without tool_calls is decoded by truncate and rollback as one
    without calls, not as corrupt data."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    messages = turns(2)
    history.append_many(messages)
    assert b'"tool_calls"' not in stored(client, history)[4]
    assert history.truncate(5) == 4  # the plain assistant a0 is the last one
    history.append(Message.user("again"))
    assert history.rollback([history.snapshot()[-1].id]) == 1
    assert history.truncate(4) == 1  # the result r0 is last: its call is read from a0
    with pytest.raises(ToolPairingError):
        history.append(Message.tool("r", tool_call_id="c0"))  # answered already
    history.append(Message.assistant("answer"))


# -- corrupt data -----------------------------------------------------------------------------

BODIES: dict[str, dict[str, Any]] = {
    "user": {"role": "user", "content": "hi"},
    "user with tool calls": {"role": "user", "tool_calls": [{"id": "a", "name": "f"}]},
    "user with a call id": {"role": "user", "tool_call_id": "x"},
    "user with a null call id": {"role": "user", "tool_call_id": None},
    "user with empty tool calls": {"role": "user", "tool_calls": []},
    "system": {"role": "system", "content": "s", "name": None, "metadata": {}},
    "tool": {"role": "tool", "tool_call_id": "c"},
    "tool without a call id": {"role": "tool", "content": "r"},
    "tool with an empty call id": {"role": "tool", "tool_call_id": ""},
    "tool with a null call id": {"role": "tool", "tool_call_id": None},
    "tool with tool calls": {
        "role": "tool",
        "tool_call_id": "c",
        "tool_calls": [{"id": "a", "name": "f"}],
    },
    "assistant with calls": {
        "role": "assistant",
        "tool_calls": [{"id": "a", "name": "f"}, {"id": "b", "name": "g", "arguments": {"x": [1]}}],
    },
    "assistant with duplicate call ids": {
        "role": "assistant",
        "tool_calls": [{"id": "a", "name": "f"}, {"id": "a", "name": "g"}],
    },
    "assistant with a call id": {"role": "assistant", "tool_call_id": "c"},
    "assistant with null tool calls": {"role": "assistant", "tool_calls": None},
    "a call without a name": {"role": "assistant", "tool_calls": [{"id": "a"}]},
    "unknown role": {"role": "wizard"},
    "no role": {"content": "x"},
    "an extra field": {"role": "user", "mood": "ok"},
    "content not text": {"role": "user", "content": 5},
    "metadata not an object": {"role": "user", "metadata": [1]},
    "an empty id": {"role": "user", "id": ""},
    "a bad timestamp": {"role": "user", "created_at": "yesterday"},
    "an integer timestamp": {"role": "user", "created_at": AT_MS},
    "no id and no timestamp": {"role": "user", "id": None},
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_reads_accept_exactly_what_the_model_accepts(case: str) -> None:
    """Each read accepts a stored message exactly when Message.model_validate_json does
    (the role rules included), and then equals it; otherwise it raises CorruptHistoryError."""
    body = {"id": "m1", "created_at": "2026-11-23T13:18:14Z", **BODIES[case]}
    if body.get("id") is None:
        del body["id"], body["created_at"]
    text = json.dumps(body)
    envelope = b'{"t":1,"m":%s}' % text.encode()
    try:
        expected: Message | None = Message.model_validate_json(text)
    except ValidationError:
        expected = None
    if expected is None:
        for read in (decode_messages, decode_entries, decode_openai):
            with pytest.raises(CorruptHistoryError) as info:
                read([envelope, envelope])
            assert info.value.index == 0
        return
    [message] = decode_messages([envelope])
    in_entry = decode_entries([envelope])[0].message
    if "id" not in body:  # as before: a fresh id and clock on every read
        message, in_entry, expected = (
            m.model_copy(update={"id": "m1", "created_at": AT})
            for m in (message, in_entry, expected)
        )
    assert message == expected
    assert in_entry == expected
    assert decode_openai([envelope]) == [expected.to_openai()]


@pytest.mark.parametrize(
    "envelope",
    [
        b'{"t":-1,"m":{"id":"a","role":"user"}}',
        b'{"m":{"id":"a","role":"user"}}',
        b'{"t":1}',
        b'{"t":1,"x":2,"m":{"id":"a","role":"user"}}',
        b"[]",
        b"not json",
    ],
)
def test_a_corrupt_envelope_raises_with_its_index(client: redis.Redis, envelope: bytes) -> None:
    """Every read raises CorruptHistoryError naming the first bad envelope's index."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many([Message.user("q"), Message.assistant("a")])
    client.rpush(history.keys.msgs, envelope, envelope)
    for read in (history.snapshot, history.snapshot_openai, history.entries):
        with pytest.raises(CorruptHistoryError) as info:
            read()
        assert info.value.index == 2
        assert info.value.conversation_id == "c"


# -- any message --------------------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=["Cs"]))
numbers = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(texts, json_values, max_size=3)
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.one_of(
    st.datetimes(timezones=st.just(UTC)),
    st.datetimes(timezones=offsets),  # whole minutes: ISO text keeps no seconds of an offset
    st.datetimes(),
    st.datetimes(timezones=st.just(UTC)).map(
        lambda d: d.replace(microsecond=d.microsecond - d.microsecond % 1000)
    ),
)


@st.composite
def any_message(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    fields: dict[str, Any] = {
        "content": draw(texts),
        "name": draw(st.none() | texts),
        "metadata": draw(objects),
        "created_at": draw(moments),
    }
    if role == "assistant":
        ids = draw(st.lists(st.text(min_size=1, max_size=8), max_size=3, unique=True))
        fields["tool_calls"] = [
            ToolCall(id=i, name=draw(st.text(min_size=1, max_size=8)), arguments=draw(objects))
            for i in ids
        ]
    if role == "tool":
        fields["tool_call_id"] = draw(st.text(min_size=1, max_size=8))
    return Message(role=role, **fields)


@settings(max_examples=300, deadline=None)
@given(message=any_message())
def test_any_message_reads_back_equal_and_stores_no_default(message: Message) -> None:
    """Any valid message reads back equal (timestamp offset included) through every read,
    and its stored JSON holds no field at its default."""
    envelope, _ = encode_message(message, HeuristicCounter(), 1 << 24)
    [back] = decode_messages([envelope])
    assert back == message
    assert back.created_at.utcoffset() == message.created_at.utcoffset()
    assert decode_openai([envelope]) == [message.to_openai()]
    stored_fields = json.loads(envelope)["m"]
    defaults: dict[str, Any] = {
        "content": "",
        "tool_calls": [],
        "tool_call_id": None,
        "name": None,
        "metadata": {},
    }
    assert not any(stored_fields.get(k, object()) == v for k, v in defaults.items())
    for call in stored_fields.get("tool_calls", []):
        assert call.get("arguments", None) != {}


@st.composite
def plain_message(draw: st.DrawFn) -> Message:
    """A message holding text and nothing else (most of what an agent stores)."""
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    fields: dict[str, Any] = {"content": draw(texts), "created_at": draw(moments)}
    if role == "tool":
        fields["tool_call_id"] = draw(st.text(min_size=1, max_size=8))
    if draw(st.booleans()):
        fields["id"] = draw(st.text(min_size=1, max_size=40))
    return Message(role=role, **fields)


@settings(max_examples=300, deadline=None)
@given(message=plain_message() | any_message())
def test_the_plain_body_is_what_the_serializer_writes(message: Message) -> None:
    """The orjson template writes a plain message byte for byte as the stored serializer
    does (control characters, quotes, non-BMP text), and leaves everything else to it."""
    general = _STORED.to_json(message.__dict__, exclude_defaults=True, by_alias=True)
    plain = _plain_body(message)
    if plain is not None:
        assert plain == general
    fields = message.__dict__
    simple = not (fields["tool_calls"] or fields["metadata"] or fields["name"] is not None)
    assert (plain is not None) == (simple and isinstance(stamp(fields["created_at"]), int))


@st.composite
def calls_message(draw: st.DrawFn) -> Message:
    """An assistant's tool calls with at most text (what an agent's turn stores)."""
    ids = draw(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3, unique=True))
    calls = [
        ToolCall(id=i, name=draw(st.text(min_size=1, max_size=8)), arguments=draw(objects))
        for i in ids
    ]
    return Message.assistant(draw(texts), tool_calls=calls, created_at=draw(moments))


@settings(max_examples=300, deadline=None)
@given(message=calls_message() | any_message())
def test_the_calls_body_is_what_the_serializer_writes(message: Message) -> None:
    """The tool calls' template writes an assistant's calls byte for byte as the stored
    serializer does, and leaves every other message to it."""
    general = _STORED.to_json(message.__dict__, exclude_defaults=True, by_alias=True)
    body = _calls_body(message)
    if body is not None:
        assert body == general
    fields = message.__dict__
    templated = (
        fields["role"] == "assistant"
        and bool(fields["tool_calls"])
        and not fields["metadata"]
        and fields["name"] is None
        and isinstance(stamp(fields["created_at"]), int)
    )
    assert (body is not None) == templated


@pytest.mark.parametrize(
    "arguments",
    [
        {"x": float("nan"), "y": [float("inf")]},
        {"big": 2**80},
        {"when": AT, "set": {1}},
        {},
    ],
    ids=["not finite", "a big integer", "objects the serializer writes", "none"],
)
def test_constructed_calls_the_template_writes_read_back_as_the_serializer_wrote_them(
    arguments: dict[str, Any],
) -> None:
    """Values only model_construct lets into arguments are written as the serializer writes
    them (NaN as NaN; an integer past 64 bits whole; a datetime as text), and read back as
    written: stored again, the same bytes."""
    call = ToolCall.model_construct(id="c1", name="f", arguments=arguments)
    message = Message.assistant("", tool_calls=[call], created_at=AT)
    body = _calls_body(message)
    assert body == _STORED.to_json(message.__dict__, exclude_defaults=True, by_alias=True)
    envelope = encode_entry(Entry(tokens=1, message=message), 1 << 16)
    assert b'"tool_calls":[{"id":"c1","name":"f"' in envelope
    [back] = decode_entries([envelope])
    assert encode_entry(back, 1 << 16) == envelope


def test_arguments_nested_to_the_limit_are_stored_and_read_back(client: redis.Redis) -> None:
    """Arguments exactly ``MAX_NESTING`` deep are taken (the template, counting every bracket
    of the calls, leaves them to the general path) and read back equal."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    call = ToolCall(id="c1", name="f", arguments={"deep": _deep(MAX_NESTING - 1)})
    message = Message.assistant("", tool_calls=[call], created_at=AT)
    assert _calls_body(message) is None
    history.append_many([Message.user("q"), message])
    assert history.snapshot()[1] == message
    assert history.entries()[1].message == message


@pytest.mark.parametrize(
    "arguments",
    [{"what": object()}, {"deep": _deep(MAX_NESTING)}],
    ids=["an object", "too deep"],
)
def test_constructed_calls_the_serializer_refuses_are_refused_by_name(
    arguments: dict[str, Any],
) -> None:
    """What the template cannot write as JSON, or what nests too deep, goes the general
    way, and is refused naming the call."""
    call = ToolCall.model_construct(id="c1", name="f", arguments=arguments)
    message = Message.assistant("", tool_calls=[call], created_at=AT)
    assert _calls_body(message) is None
    with pytest.raises(InvalidMessageError, match="tool_calls"):
        encode_entry(Entry(tokens=1, message=message), 1 << 16)


def test_constructed_arguments_the_pricing_cannot_write_are_refused_typed(
    client: redis.Redis,
) -> None:
    """A call's arguments are priced as ``json.dumps`` writes them: a value it cannot write
    (a datetime, only model_construct lets one in) refuses the append, writing nothing."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append(Message.user("q"))
    call = ToolCall.model_construct(id="c1", name="f", arguments={"when": AT})
    with pytest.raises(InvalidMessageError, match="cannot be priced"):
        history.append(Message.assistant("", tool_calls=[call]))
    assert len(stored(client, history)) == 1


def test_a_lone_surrogate_is_left_to_the_serializer_to_name() -> None:
    """A plain message orjson refuses goes the general way, and is refused with the field."""
    message = Message.user("broken \ud800 text", created_at=AT)
    assert _plain_body(message) is None
    with pytest.raises(InvalidMessageError, match="content holds a lone surrogate U\\+D800"):
        encode_message(message, HeuristicCounter(), 1 << 20)


def test_a_constructed_message_with_a_timestamp_that_is_no_datetime_is_refused_typed() -> None:
    """A plain message built without validation (model_construct) whose created_at is not a
    datetime goes the serializer's way and is refused with InvalidMessageError, as before
    the plain path."""
    message = Message.model_construct(
        id="a",
        role="user",
        content="hi",
        tool_calls=(),
        tool_call_id=None,
        name=None,
        metadata={},
        created_at="2026-01-01",  # type: ignore[arg-type]
    )
    assert _plain_body(message) is None
    with pytest.raises(InvalidMessageError, match=r"created_at|stamp"):
        encode_message(message, HeuristicCounter(), 1 << 20)
