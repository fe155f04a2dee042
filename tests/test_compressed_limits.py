"""The byte limits count the text a reader gets back: a write of text that compresses well is
held to 8 MiB of it, as is a transcript page, whatever few bytes Redis stores of it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
import zstandard

from redis_history import CorruptHistoryError, LimitExceededError, Message, RedisHistory, limits
from redis_history.store import staging
from redis_history.store.codec import decode_messages, encode_batch, encode_message, read_size
from redis_history.testing import InMemoryHistory
from redis_history.tokens import resolve_counter

pytestmark = pytest.mark.real_redis

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
"""Every message's timestamp, so that its envelope's length is the same on every run."""

COUNTER = resolve_counter("heuristic")


def alternating(texts: list[str], start: int = 0) -> list[Message]:
    """A user message, then an assistant's, and so on, one per text, with fixed ids."""
    return [
        (Message.user if (start + i) % 2 == 0 else Message.assistant)(
            text, id=f"m{start + i:05d}", created_at=AT
        )
        for i, text in enumerate(texts)
    ]


def repeated(n: int, i: int = 0) -> str:
    """``n`` characters that compress to a few dozen bytes, different for each ``i``."""
    head = f"message {i}: "
    return head + "ab" * ((n - len(head)) // 2) + "a" * ((n - len(head)) % 2)


def text_bytes(messages: list[Message]) -> int:
    return sum(len(m.content.encode()) for m in messages)


@pytest.fixture
def history(real_redis: redis.Redis) -> RedisHistory:
    return RedisHistory(real_redis, "c", token_counter="heuristic")


# -- read_size ------------------------------------------------------------------------------


def test_read_size_is_a_json_envelopes_length() -> None:
    """A plain envelope reads back as its own bytes."""
    envelope, _ = encode_message(Message.user("hi", created_at=AT), COUNTER, 1 << 20)
    assert not envelope.endswith(b"\0")
    assert read_size(envelope) == len(envelope)


def frame_length(envelope: bytes) -> int:
    """A compressed envelope's ``z``: its compressed text's length."""
    found = re.search(rb'"z":(\d+),', envelope)
    assert found is not None
    return int(found[1])


def test_read_size_of_a_compressed_envelope_counts_its_text_decompressed() -> None:
    """A compressed envelope counts its head and its text's UTF-8 length, not the frame."""
    text = "é" * 300_000 + "tail"
    envelope, _ = encode_message(Message.user(text, created_at=AT), COUNTER, 1 << 20)
    assert envelope.endswith(b"\0")
    head = len(envelope) - frame_length(envelope) - 1
    assert read_size(envelope) == head + len(text.encode())
    assert read_size(envelope) > 100 * len(envelope)


def test_read_size_counts_what_a_read_refuses_as_more_than_any_message() -> None:
    """A compressed envelope cut short, or whose frame does not say its size, counts its
    length and MAX_MESSAGE_BYTES (so it ends a page), and reads as corrupt."""
    text = "ab" * 10_000
    envelope, _ = encode_message(Message.user(text, created_at=AT), COUNTER, 1 << 20)
    z = frame_length(envelope)
    head = envelope[: len(envelope) - z - 1]
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(text.encode())
    no_size = head.replace(b'"z":%d,' % z, b'"z":%d,' % len(unsized)) + unsized + b"\0"
    cut = envelope[:-20] + b"\0"
    for damaged in (cut, no_size):
        assert read_size(damaged) == len(damaged) + limits.MAX_MESSAGE_BYTES
        with pytest.raises(CorruptHistoryError):
            decode_messages([damaged])


def test_a_batch_carries_the_read_size_of_its_envelopes() -> None:
    """encode_batch sums read_size, which a compressed text makes larger than the bytes sent."""
    messages = alternating([repeated(500_000, 0), "short", repeated(9_000, 2)])
    batch = encode_batch(messages, COUNTER, limits.MAX_MESSAGE_BYTES)
    assert batch.read_bytes == sum(map(read_size, batch.envelopes))
    assert batch.read_bytes > text_bytes(messages) > 50 * sum(map(len, batch.envelopes))


# -- one write ------------------------------------------------------------------------------


def test_a_gigabyte_of_text_in_one_write_is_refused_having_written_nothing(
    history: RedisHistory, real_redis: redis.Redis
) -> None:
    """1,000 messages of 1 MB of repeated text (about 120 KB compressed) are refused."""
    text = "a" * 1_000_000
    messages = alternating([text] * 1_000)
    assert sum(map(len, encode_batch(messages, COUNTER, 1 << 20).envelopes)) < 1 << 20
    with pytest.raises(LimitExceededError, match="bytes in one write"):
        history.append_many(messages)
    assert real_redis.llen(history.keys.msgs) == 0
    assert not real_redis.exists(history.keys.meta)


def just_under_the_limit() -> list[Message]:
    """Messages of repeated text that read back as exactly MAX_BATCH_BYTES: eight of about
    1 MB, then one sized to what is left."""
    messages = alternating([repeated(1_040_000, i) for i in range(8)])
    left = limits.MAX_BATCH_BYTES - encode_batch(messages, COUNTER, 1 << 20).read_bytes
    probe = alternating([repeated(left - 200, 8)], 8)
    overhead = encode_batch(probe, COUNTER, 1 << 20).read_bytes - (left - 200)
    messages += alternating([repeated(left - overhead, 8)], 8)
    assert encode_batch(messages, COUNTER, 1 << 20).read_bytes == limits.MAX_BATCH_BYTES
    return messages


def test_a_write_of_exactly_8_mib_of_text_is_taken_and_one_byte_more_refused(
    history: RedisHistory, real_redis: redis.Redis
) -> None:
    """The limit counts the text read back, and holds at its very edge."""
    messages = just_under_the_limit()
    over = [*messages[:-1], messages[-1].model_copy(update={"content": messages[-1].content + "a"})]
    with pytest.raises(LimitExceededError, match="bytes in one write"):
        history.append_many(over)
    with pytest.raises(LimitExceededError, match="bytes in one write"):
        history.replace(over)
    assert real_redis.llen(history.keys.msgs) == 0
    history.append_many(messages)
    assert [m.content for m in history.snapshot()] == [m.content for m in messages]


def test_a_splices_summaries_are_held_to_the_text_they_read_back(history: RedisHistory) -> None:
    """Summaries that compress to kilobytes but read back as more than 8 MiB are refused."""
    history.append_many(alternating(["q", "a", "q2", "a2"]))
    summaries = [Message.system("s" * 1_000_000, created_at=AT) for _ in range(9)]
    with pytest.raises(LimitExceededError, match="bytes in one write"):
        history.splice_prefix(2, summaries)
    assert [m.content for m in history.snapshot()] == ["q", "a", "q2", "a2"]


def test_the_in_memory_history_holds_the_same_limit() -> None:
    """The reference history refuses and takes what the store does."""
    memory = InMemoryHistory("c", token_counter="heuristic")
    messages = just_under_the_limit()
    with pytest.raises(LimitExceededError, match="bytes in one write"):
        memory.append_many(alternating(["a" * 1_000_000] * 9))
    memory.append_many(messages)
    assert len(memory.snapshot()) == len(messages)


def test_an_import_or_a_fork_stages_chunks_of_at_most_8_mib_of_text() -> None:
    """Staging splits compressed envelopes by what they read back, not by their few bytes."""
    messages = alternating([repeated(1_000_000, i) for i in range(20)])
    envelopes = encode_batch(messages, COUNTER, 1 << 20).envelopes
    chunks = list(staging.chunks(envelopes))
    assert [len(c) for c in chunks] == [8, 8, 4]
    assert all(sum(map(read_size, c)) <= limits.MAX_BATCH_BYTES for c in chunks)


def test_a_fork_of_more_text_than_one_write_copies_it_all(
    history: RedisHistory, real_redis: redis.Redis
) -> None:
    """A fork of 20 MB of text, staged in chunks of at most 8 MiB of it, is whole."""
    texts = [repeated(1_000_000, i) for i in range(20)]
    for start in range(0, 20, 5):
        history.append_many(alternating(texts[start : start + 5], start))
    real_redis.config_resetstat()
    fork = history.fork("f", at="m00019")
    assert real_redis.info("commandstats")["cmdstat_rpush"]["calls"] == 3
    assert [m.content for m in fork.snapshot()] == texts


# -- transcript pages ----------------------------------------------------------------------

MESSAGE_TEXT = 128 * 1024
"""Each message's text: 512 of them are 64 MiB, which Redis stores in well under 1 MiB."""


def write_64_mib(history: Any) -> list[Message]:
    """512 messages of 128 KiB of repeated text each, in writes under 8 MiB of it."""
    messages = alternating([repeated(MESSAGE_TEXT, i) for i in range(512)])
    for start in range(0, len(messages), 60):
        history.append_many(messages[start : start + 60])
    return messages


@pytest.fixture(params=["redis", "memory"])
def any_history(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The store on the session's real Redis, and the reference history it is held to."""
    if request.param == "memory":
        yield InMemoryHistory("c", token_counter="heuristic")
    else:
        yield RedisHistory(request.getfixturevalue("real_redis"), "c", token_counter="heuristic")


def test_a_page_ends_once_past_8_mib_of_text(any_history: Any) -> None:
    """A page of 1,000 asked returns at most 8 MiB and one message of text, and says where
    the next page starts: just after it."""
    messages = write_64_mib(any_history)
    page = any_history.transcript_page(0, 1000)
    read = text_bytes(page.messages)
    assert limits.MAX_READ_BYTES - MESSAGE_TEXT < read <= limits.MAX_READ_BYTES + MESSAGE_TEXT
    assert page.messages == messages[: len(page.messages)]
    assert page.next == page.start + len(page.messages)
    later = any_history.transcript_page(page.next, 1000)
    assert later.messages[0] == messages[len(page.messages)]


def test_paging_over_64_mib_of_text_gives_every_message_once_in_order(any_history: Any) -> None:
    """Pages cut by the text they read back neither skip nor repeat, across the archive and
    the live list."""
    messages = write_64_mib(any_history)
    any_history.splice_prefix(100, Message.system("summary", created_at=AT))
    pages, start = 0, 0
    paged: list[Message] = []
    while start is not None:
        page = any_history.transcript_page(start, 1000)
        assert text_bytes(page.messages) <= limits.MAX_READ_BYTES + MESSAGE_TEXT
        paged += page.messages
        start, pages = page.next, pages + 1
    assert paged == messages
    assert pages >= 8
    assert list(any_history.iter_transcript(1000)) == messages
    assert any_history.transcript() == messages
