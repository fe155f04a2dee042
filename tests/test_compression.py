"""Compressed envelopes: a long text is stored compressed and every read gives it back as
written; the scripts read the token count, the id and the call id of such an envelope as they
read a JSON one; envelopes written before (JSON) read as they did; a damaged one is corrupt
data, named by its index."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from samples import incompressible

from redis_history import (
    CorruptHistoryError,
    Message,
    MessageTooLargeError,
    RedisHistory,
    ToolCall,
    ToolPairingError,
)
from redis_history.admin.dump import export_conversation, import_conversation
from redis_history.admin.target import Target
from redis_history.cli import main
from redis_history.store import codec
from redis_history.store.codec import (
    COMPRESS_BYTES,
    decode_entries,
    decode_messages,
    decode_openai,
    encode_entry,
    encode_message,
)
from redis_history.tokens import HeuristicCounter, resolve_counter

RESULT = json.dumps(
    {"results": [{"id": f"r{i:04d}", "title": f"fare {i} to Osaka", "price": i} for i in range(90)]}
)
"""A tool result of about 4 KB of JSON: quotes to escape, and repetition to compress."""


def stored(client: Any, history: RedisHistory) -> list[bytes]:
    return [bytes(item) for item in client.lrange(history.keys.msgs, 0, -1)]


def tool_turn(n: int, result: str = RESULT) -> list[Message]:
    return [
        Message.user(f"question {n}", id=f"u{n}"),
        Message.assistant("", tool_calls=[ToolCall(id=f"c{n}", name="search")], id=f"a{n}"),
        Message.tool(result, tool_call_id=f"c{n}", id=f"t{n}"),
        Message.assistant(f"answer {n} " + "é" * (n * 500), id=f"b{n}"),
    ]


def compressed(envelope: bytes) -> bool:
    return envelope.endswith(b"\0")


def test_a_long_text_is_stored_compressed_and_every_read_gives_it_back(
    client: redis.Redis,
) -> None:
    """The tool result's envelope is its message without content, then its text compressed:
    a third of the JSON here; snapshot, entries, chat-completions dicts, transcript and
    ``show`` give back the text as written."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    messages = [*tool_turn(0), *tool_turn(5)]
    history.append_many(messages)
    envelopes = stored(client, history)
    kept = [compressed(e) for e in envelopes]
    assert kept == [False, False, True, False, False, False, True, True]  # b5: 2,500 "é" more
    head = envelopes[2][: envelopes[2].index(b"}}") + 2]
    assert head.startswith(b'{"t":')
    assert b',"z":' in head
    assert b'"m":{"id":"t0","role":"tool","tool_call_id":"c0","at":' in head
    assert b'"content"' not in head
    assert len(envelopes[2]) < len(json.dumps(messages[2].to_openai())) / 3
    assert history.snapshot() == messages
    assert [e.message for e in history.entries()] == messages
    assert history.snapshot_openai() == [m.to_openai() for m in messages]
    assert history.transcript() == messages


def test_a_short_text_and_a_message_with_more_than_text_stay_json(client: redis.Redis) -> None:
    """Under COMPRESS_BYTES, or with tool calls, metadata or a name, a message is JSON."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(
        [
            Message.user("x" * (COMPRESS_BYTES - 1)),
            Message.assistant(RESULT, tool_calls=[ToolCall(id="c", name="f")]),
            Message.tool(RESULT, tool_call_id="c", name="search"),
            Message.assistant(RESULT, metadata={"model": "m"}),
        ]
    )
    for envelope in stored(client, history):
        assert not compressed(envelope)
        json.loads(envelope)


def test_envelopes_written_before_read_beside_compressed_ones(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long text stored as JSON (as every one was before) reads as it did, in the same
    list as compressed envelopes, and the scripts count it the same."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    before, after = tool_turn(0), tool_turn(1)
    with monkeypatch.context() as m:
        m.setattr(codec, "COMPRESS_BYTES", 1 << 40)
        history.append_many(before)
    history.append_many(after)
    envelopes = stored(client, history)
    assert [compressed(e) for e in envelopes[2:8:4]] == [False, True]  # t0, t1
    assert history.snapshot() == before + after
    assert history.snapshot_openai()[2] == before[2].to_openai()
    assert history.token_estimate() == sum(e.tokens for e in history.entries())
    assert history.rollback(["u1", "a1", "t1", "b1"]) == 4
    assert history.snapshot() == before
    old = b'{"t":7,"m":{"id":"old","role":"user","content":"%s","created_at":1795439894017}}'
    client.rpush(history.keys.msgs, old % (b"w" * 3000))
    assert history.snapshot()[-1].content == "w" * 3000


def test_the_scripts_read_tokens_ids_and_call_ids_of_compressed_envelopes(
    client: redis.Redis,
) -> None:
    """The estimate sums compressed envelopes' counts; truncate rebuilds the turn state from a
    compressed tool result (its call is answered); rollback and a fenced splice find compressed
    messages by id; the transcript keeps the compressed originals."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    first = tool_turn(0)
    history.append_many(first + tool_turn(1))
    assert compressed(stored(client, history)[6])
    entries = history.entries()
    assert history.token_estimate() == sum(e.tokens for e in entries)
    assert history.truncate(7) == 1  # ends at the compressed result t1
    with pytest.raises(ToolPairingError):
        history.append(Message.tool("again", tool_call_id="c1"))
    history.append(Message.assistant("answer 1", id="b1-again"))
    assert history.rollback(["b1-again"]) == 1
    assert history.rollback(["t1"], reopen_calls=True) == 1
    assert history.token_estimate() == sum(e.tokens for e in entries[:6])
    history.append(Message.tool(RESULT, tool_call_id="c1", id="t1-again"))
    history.append(Message.assistant("answer 1", id="b1-later"))
    dropped = history.splice_prefix(
        4, Message.system("summary"), expected_ids=["u0", "a0", "t0", "b0"]
    )
    assert dropped == 4
    assert history.transcript() == [*first, *history.snapshot()[1:]]
    copy = history.fork("copy", at="t1-again")
    assert [m.id for m in copy.snapshot()[1:]] == ["u1", "a1", "t1-again"]
    assert copy.snapshot()[-1].content == RESULT


def test_a_replace_keeping_a_long_summary_keeps_it_a_summary(client: redis.Redis) -> None:
    """A summary of 2 KiB or more is compressed; a replace that keeps it marks it ``s`` inside
    the script (``replace-4.lua`` adds the flag to the head) and it reads back whole."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(tool_turn(0) + tool_turn(1))
    summary = Message.system("The user asked about fares. " * 100, id="sum")
    history.splice_prefix(4, summary)
    assert compressed(stored(client, history)[0])
    history.replace(history.snapshot())
    (first, *_) = history.entries()
    assert first.summary
    assert first.message == summary
    assert stored(client, history)[0].startswith(b'{"t":')


def test_export_writes_the_text_and_import_stores_it_compressed(real_redis: redis.Redis) -> None:
    """An export's lines are JSON with the text in them; the import stores it compressed again
    and reads back equal."""
    history = RedisHistory(real_redis, "c")
    messages = tool_turn(0) + tool_turn(1)
    history.append_many(messages)
    stream = io.BytesIO()
    export_conversation(Target(real_redis, history.namespace), "c", stream)
    lines = stream.getvalue().splitlines()
    assert not any(line.endswith(b"\0") for line in lines)
    assert any(
        json.loads(line).get("live", {}).get("m", {}).get("content") == RESULT for line in lines
    )
    _, copy = import_conversation(Target(real_redis, "other"), io.BytesIO(stream.getvalue()))
    assert compressed(stored(real_redis, copy)[2])
    assert copy.snapshot() == messages


@pytest.mark.real_redis
def test_show_prints_the_text_as_written(
    redis_url: str, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """``redis-history show`` prints a compressed tool result's text."""
    RedisHistory(real_redis, "c1").append_many(tool_turn(0))
    assert main(["show", "c1", "--redis-url", redis_url]) == 0
    assert json.dumps(RESULT) in capsys.readouterr().out


def test_a_replayed_compressed_append_is_applied_once(client: redis.Redis) -> None:
    """A compressed append sent again (a retry) is a replay: stored once."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    turn = tool_turn(0)
    history.append_many(turn[:2])
    history.append(turn[2])
    history.append(turn[2])
    assert [m.id for m in history.snapshot()] == ["u0", "a0", "t0"]


def test_the_size_limit_is_on_the_json_form(client: redis.Redis) -> None:
    """``max_message_bytes`` bounds a message's JSON, compressed or not: one whose JSON is
    over it is refused though it would compress far under it; one under it is taken."""
    message = Message.user("fare " * 1000)
    envelope, _ = encode_message(message, HeuristicCounter(), 1 << 20)
    (entry,) = decode_entries([envelope])
    limit = len(encode_entry(entry, 1 << 20, inline=True))
    assert len(envelope) < limit / 10
    over = RedisHistory(client, "c", token_counter="heuristic", max_message_bytes=limit - 1)
    with pytest.raises(MessageTooLargeError):
        over.append(message)
    history = RedisHistory(client, "c", token_counter="heuristic", max_message_bytes=limit)
    history.append(message)
    assert stored(client, history) == [envelope]


@pytest.mark.parametrize(
    "damage",
    [
        lambda e: e[:-2] + b"\0",  # the compressed text cut short
        lambda e: e.replace(b'"z":', b'"z":1', 1),  # a length longer than what follows
        lambda e: e[: e.index(b"}}") + 2] + b"\x28\xb5\x2f\xfd garbage\0",
        lambda e: b'{"t":1,"m":{"id":"a","role":"user"}}\0',  # a NUL after JSON
        lambda e: b"",
    ],
    ids=["cut", "length", "garbage", "json-with-nul", "empty"],
)
def test_a_damaged_compressed_envelope_is_corrupt_data_with_its_index(
    client: redis.Redis, damage: Any
) -> None:
    """Every read raises CorruptHistoryError naming the first damaged envelope."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(tool_turn(0)[:3])
    client.rpush(history.keys.msgs, damage(stored(client, history)[2]))
    for read in (history.snapshot, history.snapshot_openai, history.entries):
        with pytest.raises(CorruptHistoryError) as info:
            read()
        assert info.value.index == 3


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(st.characters(exclude_categories=["Cs"]), min_size=1),
    repeat=st.integers(1, 400),
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    summary=st.booleans(),
)
def test_any_long_text_reads_back_equal_from_its_compressed_envelope(
    text: str, repeat: int, role: str, summary: bool
) -> None:
    """Control characters, quotes, CJK, emoji and NULs inside: every read gives the text back,
    and the entry its count and flags."""
    content = (text * (COMPRESS_BYTES // len(text.encode()) + repeat))[: 6 * COMPRESS_BYTES]
    message = Message(
        role=role,
        content=content,
        tool_call_id="c" if role == "tool" else None,
    )
    counter = resolve_counter("heuristic")
    envelope, tokens = encode_message(message, counter, 1 << 20, summary=summary)
    (entry,) = decode_entries([envelope])
    assert decode_messages([envelope]) == [message]
    assert decode_openai([envelope]) == [message.to_openai()]
    assert (entry.message, entry.tokens, entry.summary) == (message, tokens, summary)
    assert encode_entry(entry, 1 << 20) == envelope
    if compressed(envelope):
        assert len(envelope) < len(encode_entry(entry, 1 << 20, inline=True))


def test_hex_digits_stay_large_compressed() -> None:
    """The tests' stand-in for a large text keeps at least 40% of its bytes compressed."""
    text = incompressible(3 * 4096)
    envelope, _ = encode_message(Message.user(text), HeuristicCounter(), 1 << 20)
    assert compressed(envelope)
    assert len(envelope) > 0.4 * len(text)
