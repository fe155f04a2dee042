"""No accepted input holds Redis for long: every limit is refused before anything is sent,
and the worst inputs the limits allow run each server call under 250 ms of the server's own
CPU time (``server_cpu.py``: not a timer in the test, and not stretched by a busy machine)."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from samples import incompressible
from server_cpu import MeteredClient, metered

from redis_history import (
    LimitExceededError,
    Message,
    RedisHistory,
    StoreUnavailableError,
    ToolCall,
    limits,
)
from redis_history.demo.server import RedisServer
from redis_history.parts import FilePart
from redis_history.store import codec
from redis_history.wire import lane

ROOT = Path(__file__).resolve().parent.parent


def test_the_scripts_limits_are_the_clients() -> None:
    """lua/includes/limits.lua holds the numbers redis_history.limits documents."""
    source = (ROOT / "lua" / "includes" / "limits.lua").read_text()
    names, values = re.search(r"^local ([A-Z_, ]+) = ([\d, ]+)$", source, re.MULTILINE).groups()  # type: ignore[union-attr]
    in_lua = dict(zip(names.split(", "), map(int, values.split(", ")), strict=True))
    assert in_lua == {
        "MAX_READ_BYTES": limits.MAX_READ_BYTES,
        "MAX_ENTRY_BYTES": limits.MAX_MESSAGE_BYTES,
        "MAX_REWRITE": limits.MAX_REWRITE,
        "MAX_ROLLBACK": limits.MAX_ROLLBACK,
        "MAX_BLOB_TOTAL": limits.MAX_CONVERSATION_BLOB_BYTES,
        "MAX_BLOBS": limits.MAX_CONVERSATION_BLOBS,
    }


def calls(history: Any) -> int:
    """Every command the server has run so far (``INFO commandstats``)."""
    return sum(int(s["calls"]) for s in history.client.info("commandstats").values())


def assistant_calling(n: int, prefix: str = "c") -> Message:
    return Message.assistant(
        "", tool_calls=[ToolCall(id=f"{prefix}{i}", name="f") for i in range(n)]
    )


def many(n: int, start: int = 0) -> list[Message]:
    """``n`` alternating user and assistant messages (n even)."""
    return [
        Message.user(f"q{i}", id=f"m{i}") if i % 2 == 0 else Message.assistant(f"a{i}", id=f"m{i}")
        for i in range(start, start + n)
    ]


def big(
    n: int,
    size: int,
    start: int = 0,
    text: Callable[[int, int], str] = lambda n, i: "ua"[i % 2] * n,
) -> list[Message]:
    """``n`` alternating messages of about ``size`` bytes each, of ``text(size, i)``: one
    letter by default, which compressed is a few dozen bytes (see :func:`uncompressed`)."""
    return [
        Message.user(text(size, i), id=f"b{i}")
        if i % 2 == 0
        else Message.assistant(text(size, i), id=f"b{i}")
        for i in range(start, start + n)
    ]


ENTRY = limits.MAX_MESSAGE_BYTES - 1024
"""The text of a message as large as a history may store."""


@pytest.fixture
def uncompressed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long texts stored as JSON: their largest stored form (compressed, one letter repeated
    is a few dozen bytes)."""
    monkeypatch.setattr(codec, "COMPRESS_BYTES", limits.MAX_MESSAGE_BYTES + 1)


OVER: dict[str, Callable[[RedisHistory], Any]] = {
    "a million messages in one batch": lambda h: h.append_many(
        [Message.user("u"), Message.assistant("a")] * 500_000
    ),
    "more than 8 MiB in one batch": lambda h: h.append_many(big(17, ENTRY, text=incompressible)),
    "36,000 tool calls in one message": lambda h: h.append(assistant_calling(36_000)),
    "a splice of 999,990 messages": lambda h: h.splice_prefix(999_990, Message.system("s")),
    "a rollback of 1,001 messages": lambda h: h.rollback([f"m{i}" for i in range(1001)]),
    "a replace expecting 10,001 ids": lambda h: h.replace(
        [Message.user("u")], expected_ids=[f"m{i}" for i in range(10_001)]
    ),
    "a transcript page of 1,001": lambda h: h.transcript_page(0, 1_001),
    "a TTL of 1e14 seconds": lambda h: h.set_ttl(1e14),
    "input tokens of 10**13": lambda h: h.record_input_tokens(10**13),
    "an op_id of 257 characters": lambda h: h.truncate(0, op_id="x" * 257),
    "a rollback id of 300,000 characters": lambda h: h.rollback(["x" * 300_000]),
    "an expected id of 257 characters": lambda h: h.replace([], expected_ids=["x" * 257]),
    "a lock token of 257 characters": lambda h: h.splice_prefix(
        1, Message.system("s"), lock_token="x" * 257
    ),
}


@pytest.mark.real_redis
@pytest.mark.parametrize("call", OVER.values(), ids=OVER.keys())
def test_an_input_over_a_limit_is_refused_before_anything_is_sent(
    real_redis: redis.Redis, call: Callable[[RedisHistory], Any]
) -> None:
    """Each limit raises LimitExceededError (a ValueError) and sends no command."""
    history = RedisHistory(real_redis, "c", max_message_bytes=limits.MAX_MESSAGE_BYTES)
    history.append_many([Message.user("q"), Message.assistant("a")])
    before = calls(history)
    with pytest.raises(LimitExceededError):
        call(history)
    assert calls(history) == before + 1  # the INFO that counted them
    assert [m.content for m in history.snapshot()] == ["q", "a"]


def test_max_message_bytes_has_a_ceiling() -> None:
    """A history takes max_message_bytes up to MAX_MESSAGE_BYTES, the size every script's
    read budget counts on."""
    RedisHistory(redis.Redis(), "c", max_message_bytes=limits.MAX_MESSAGE_BYTES)
    with pytest.raises(LimitExceededError):
        RedisHistory(redis.Redis(), "c", max_message_bytes=limits.MAX_MESSAGE_BYTES + 1)


LOOP = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return x"


@pytest.mark.real_redis
def test_the_meter_fails_a_call_over_250_ms(redis_server: RedisServer) -> None:
    """The bound the tests below hold can fail: a script that loops for 400 ms of the server's
    CPU (its length found from a shorter loop's, in CPU time too) is charged over 250 ms,
    however busy the machine. The metered client keeps the store's connection lane, so the
    tests below take the paths production takes (staged transactions too)."""
    client = metered(redis_server)
    assert lane.lane_of(client.connection_pool) is None
    shorts = []
    for _ in range(3):  # the least: another client's command run meanwhile only adds
        client.eval(LOOP, 0, 1_000_000)
        shorts.append(client.meter.calls[-1][0])
    client.eval(LOOP, 0, 1_000_000 * 400_000_000 // min(shorts))
    assert [what for _, what in client.meter.over()] == [f"EVAL {LOOP}"[:80]]
    RedisHistory(client, "c").append(Message.user("q"))
    assert lane.lane_of(client.connection_pool) is not None
    client.close()


@pytest.mark.real_redis
@pytest.mark.slow
def test_the_largest_batches_stay_under_250_ms(server_cpu: redis.Redis, uncompressed: None) -> None:
    """10,000 messages in one append (scripted and staged), 8 MiB in one, 1,024 calls answered
    in one, a replace of 10,000 fenced on 10,000, a splice of 10,000, one over 8 MiB."""
    history = RedisHistory(server_cpu, "c", max_message_bytes=limits.MAX_MESSAGE_BYTES)
    history.append_many(many(limits.MAX_BATCH_MESSAGES))  # on an empty list: the script
    history.append_many(many(limits.MAX_BATCH_MESSAGES, limits.MAX_BATCH_MESSAGES))  # staged
    history.append_many(big(8, ENTRY))
    calls = limits.MAX_TOOL_CALLS
    history.append_many(
        [
            Message.user("q"),
            assistant_calling(calls, "x" * 200),
            *(Message.tool("r", tool_call_id=f"{'x' * 200}{i}") for i in range(calls)),
            Message.assistant("done"),
        ]
    )
    snapshot = history.snapshot()
    assert history.truncate(len(snapshot) - calls - 3) == calls + 3
    assert history.splice_prefix(limits.MAX_REWRITE, Message.system("s")) == limits.MAX_REWRITE
    kept = history.snapshot()[: limits.MAX_BATCH_MESSAGES - 1]
    history.replace(kept)
    history.replace(kept, expected_ids=[m.id for m in kept])
    assert kept[-1].role == "assistant"
    history.append_many(big(6, ENTRY, 10))
    history.append_many(big(6, ENTRY, 16))
    length = history.len()
    assert history.splice_prefix(length - 12, Message.system("s")) == length - 12
    with pytest.raises(LimitExceededError):  # over 8 MiB: refused, having read that much
        history.splice_prefix(10, Message.system("s"))
    history.delete()


@pytest.mark.real_redis
@pytest.mark.slow
def test_rewrites_of_a_long_conversation_stay_under_250_ms(
    server_cpu: redis.Redis, uncompressed: None
) -> None:
    """On 100,000 messages: a rollback at the edge of its reach and one beyond it, truncates
    at the limits, a transcript paged over large entries, an archive capped, a delete."""
    history = RedisHistory(server_cpu, "c", max_message_bytes=limits.MAX_MESSAGE_BYTES)
    for start in range(0, 100_000, limits.MAX_BATCH_MESSAGES):
        history.append_many(many(limits.MAX_BATCH_MESSAGES, start))
    messages = history.tail(limits.MAX_ROLLBACK + 2)
    with pytest.raises(LimitExceededError, match="not among the last"):
        history.rollback([messages[1]])
    assert history.rollback(messages[2:4]) == 2
    with pytest.raises(LimitExceededError):
        history.truncate(history.len() - limits.MAX_REWRITE - 2)
    assert history.truncate(history.len() - limits.MAX_REWRITE) == limits.MAX_REWRITE
    for _ in range(9):  # the archive: 90,000 entries
        history.splice_prefix(limits.MAX_REWRITE, Message.system("s"))
    history.append_many(big(2, ENTRY, 100))
    history.append_many(big(2, ENTRY, 102))
    history.splice_prefix(1, Message.system("s"), archive_max_messages=1)  # caps 10,000 a call
    assert sum(1 for _ in history.iter_transcript(limits.MAX_PAGE)) > 0
    history.truncate(0)
    history.append_many(many(10))
    history.delete()


@pytest.mark.real_redis
def test_a_busy_server_is_an_unknown_outcome_not_a_refusal(redis_url: str) -> None:
    """While another client's script holds Redis past its busy threshold, a write gets BUSY:
    StoreUnavailableError (it may or may not have run; repeating it is safe)."""
    admin = redis.Redis.from_url(redis_url)
    admin.flushall()
    admin.config_set("busy-reply-threshold", 100)
    history = RedisHistory(redis.Redis.from_url(redis_url), "c")
    history.append(Message.user("q"))
    busy = threading.Thread(
        target=lambda: _ignore(lambda: redis.Redis.from_url(redis_url).eval("while true do end", 0))
    )
    busy.start()
    try:
        while not _busy(admin):  # until the script passed the threshold
            time.sleep(0.05)
        with pytest.raises(StoreUnavailableError, match="busy"):
            history.append(Message.assistant("a"))
    finally:
        admin.script_kill()
        busy.join(10)
        admin.config_set("busy-reply-threshold", 5000)
    history.append(Message.assistant("a"))
    assert [m.content for m in history.snapshot()] == ["q", "a"]


def _busy(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.ResponseError as exc:
        return str(exc).startswith("BUSY")
    return False


def _ignore(call: Callable[[], Any]) -> None:
    with contextlib.suppress(redis.RedisError):  # the script is killed
        call()


@pytest.mark.real_redis
@pytest.mark.slow
def test_long_runs_of_summaries_or_tool_results_stay_under_250_ms(server_cpu: redis.Redis) -> None:
    """A replace over 100,000 summaries at the head (ten splices of 10,000) reads at most
    10,000 of them and refuses past that; a truncate after 90,000 tool results written
    without validation reads back at most 10,000 of them, refusing past that."""
    history = RedisHistory(server_cpu, "c")
    history.append(Message.user("q"))
    for round_ in range(10):
        summaries = [Message.system("", id=f"s{round_}-{i}") for i in range(10_000)]
        history.splice_prefix(1, summaries)
    with pytest.raises(LimitExceededError, match="summaries at the head"):
        history.replace([Message.user("x")])
    history.delete()

    loose = RedisHistory(server_cpu, "loose", validate=False)
    loose.append_many([Message.user("q"), assistant_calling(1)])
    for _ in range(9):
        loose.append_many([Message.tool("r", tool_call_id="c0") for _ in range(10_000)])
    with pytest.raises(LimitExceededError, match="tool results before"):
        loose.truncate(loose.len() - 1)
    assert loose.truncate(0) == 90_002  # no read at all


@pytest.mark.real_redis
@pytest.mark.slow
def test_inline_data_at_its_limits_stays_under_250_ms(server_cpu: MeteredClient) -> None:
    """A conversation filled with 128 MiB of inline data, 20 MiB a write (two 10 MiB files
    each) and the rest, then read whole (20 MiB an ``HMGET``), replaced, exported and
    deleted. Its calls copy tens of MiB, whose CPU time grows when other processes share the
    memory bus: the scenario runs twice after a warm-up and each call is charged the lesser
    of its two runs (noise only adds CPU)."""
    runs = []
    for _ in range(3):
        server_cpu.flushall()
        server_cpu.meter.calls.clear()
        fill_with_inline_data(server_cpu)
        runs.append(list(server_cpu.meter.calls))
    first, second = runs[1:]
    assert [what for _, what in first] == [what for _, what in second]
    server_cpu.meter.calls = [min(a, b) for a, b in zip(first, second, strict=True)]


def fill_with_inline_data(client: MeteredClient) -> None:
    history = RedisHistory(client, "c")
    write, total = limits.MAX_WRITE_BLOB_BYTES, limits.MAX_CONVERSATION_BLOB_BYTES
    sizes = [write] * (total // write) + [total % write]
    sent: list[Message] = []
    for w, size in enumerate(sizes):
        files = [
            FilePart(data=bytes([w, i]) * (size // 4), media_type="application/pdf")
            for i in range(2)
        ]
        sent += [Message.user([f"files {w}", *files]), Message.assistant("read")]
        history.append_many(sent[-2:])
    assert (
        client.hget(history.keys.meta, "blobs") == str(limits.MAX_CONVERSATION_BLOB_BYTES).encode()
    )
    with pytest.raises(LimitExceededError):  # past the conversation's limit: refused
        history.append(
            Message.user(["one more", FilePart(data=b"z" * 2048, media_type="text/plain")])
        )
    assert history.snapshot() == sent
    with pytest.raises(LimitExceededError):  # all of it in one write: refused before sending
        history.replace(sent)
    history.replace(sent[:2])  # one write's worth
    history.delete()
