"""Whole reads and long ranges go in pages of at most ``PAGE_ENTRIES`` entries, fenced on the
conversation's version: every backend reads what one ``LRANGE`` would; no command spans more
than a page (counted in ``SLOWLOG``, which logs every command here); a rewrite, a delete or
appends between two round trips never tear a read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from backends import HistoryFactory

from redis_history import HistoryError, Message, RedisHistory
from redis_history.admin.dump import read_dump
from redis_history.demo.server import RedisServer
from redis_history.store import _pages
from redis_history.store._pages import PAGE_ENTRIES, READ_ATTEMPTS
from redis_history.wire.call import Call


@pytest.fixture(autouse=True)
def no_hints() -> Iterator[None]:
    """No length remembered from another test's reads (``_pages.LENGTHS``)."""
    _pages.LENGTHS.clear()
    yield
    _pages.LENGTHS.clear()


def chat(n: int, tag: str = "m") -> list[Message]:
    """``n`` messages, a user's and an assistant's in turn, ids ``<tag><i>``."""
    return [
        Message.user(f"{tag} question {i}", id=f"{tag}{i}")
        if i % 2 == 0
        else Message.assistant(f"{tag} answer {i}", id=f"{tag}{i}")
        for i in range(n)
    ]


def ids(messages: list[Message]) -> list[str]:
    return [message.id for message in messages]


@pytest.mark.parametrize("n", [PAGE_ENTRIES - 1, PAGE_ENTRIES, 300])
def test_whole_reads_and_ranges_read_what_one_lrange_would(
    make_history: HistoryFactory, n: int
) -> None:
    history = make_history()
    written = ids(chat(n))
    history.append_many(chat(n))
    assert ids(history.snapshot()) == written
    assert [entry.message.id for entry in history.entries()] == written
    assert [message["content"] for message in history.snapshot_openai()] == [
        message.content for message in chat(n)
    ]
    assert [m.id for turn in history.turns() for m in turn.to_messages()] == written
    assert ids(history.tail(n - 2)) == written[2:]
    assert ids(history.tail(n + 5)) == written
    assert ids(history.range(3, n - 3)) == written[3 : n - 3]
    assert ids(history.range(-(n - 1), -1)) == written[-(n - 1) : -1]
    assert ids(history.range(2)) == written[2:]
    assert ids(history.range(n - 1, 3)) == []


@pytest.fixture
def logged() -> Iterator[redis.Redis]:
    """A server of its own that logs every command in ``SLOWLOG`` (its threshold 0)."""
    with RedisServer() as server:
        client = server.client()
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        yield client
        client.close()


def commands_of(client: redis.Redis, read: Callable[[], Any]) -> list[list[bytes]]:
    """The commands ``read`` sent, from ``SLOWLOG``, oldest first."""
    client.slowlog_reset()
    read()
    entries = client.slowlog_get(100_000)
    return [entry["command"].split() for entry in reversed(entries)][1:]  # after the reset


def span(command: list[bytes]) -> int:
    start, stop = int(command[2]), int(command[3])
    assert (start >= 0) == (stop >= 0), command  # pages are read at positions from the head
    return stop - start + 1


def test_no_command_of_a_read_spans_more_than_a_page(logged: redis.Redis) -> None:
    history = RedisHistory(logged, "c")
    history.append_many(chat(1_000))
    reads: list[Callable[[], Any]] = [
        history.snapshot,
        history.snapshot_openai,
        history.entries,
        history.turns,
        lambda: history.tail(900),
        lambda: history.range(5, 990),
        lambda: history.range(-700),
    ]
    for read in reads:
        commands = commands_of(logged, read)
        ranges = [command for command in commands if command[0] == b"LRANGE"]
        assert ranges
        assert max(map(span, ranges)) <= PAGE_ENTRIES
        # the whole list, once, and each page's first entry again (the fence)
        assert sum(map(span, ranges)) <= 1_000 + len(ranges) + 2 * PAGE_ENTRIES
        # the version when the length is read and after the last page: two round trips
        versions = [command for command in commands if command[:1] == [b"HGET"]]
        assert len(versions) <= 3, commands
    short = RedisHistory(logged, "short")
    short.append_many(chat(PAGE_ENTRIES - 1))
    assert commands_of(logged, short.snapshot) == [
        [b"LRANGE", b"rh:default:{short}:msgs", b"0", b"63"]
    ]


class Interrupted(RedisHistory):
    """A history that runs the next of ``between`` after each pipelined round trip of a
    read, before the next is sent."""

    between: list[Callable[[], Any]]
    batches = 0

    def execute(self, call: Call[Any]) -> Any:
        reply = super().execute(call)
        if call.batch:
            type(self).batches += 1
            if self.between:
                self.between.pop(0)()
        return reply


@pytest.fixture
def interrupted(real_redis: redis.Redis) -> tuple[Interrupted, RedisHistory]:
    """The same conversation of 300 messages, as a reader whose round trips are interrupted
    and as a writer."""
    Interrupted.batches = 0
    reader = Interrupted(real_redis, "c")
    reader.between = []
    writer = RedisHistory(real_redis, "c")
    writer.append_many(chat(300))
    return reader, writer


def test_appends_between_pages_leave_the_read_as_the_length_saw_it(
    interrupted: tuple[Interrupted, RedisHistory],
) -> None:
    reader, writer = interrupted
    reader.between = [lambda: writer.append_many(chat(50, "late"))]
    assert ids(reader.snapshot()) == ids(chat(300))
    assert Interrupted.batches == 2  # read once: appends do not fail the fence


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda w: w.splice_prefix(10, [Message.system("summary", id="s")]),
        lambda w: w.truncate(250),
        lambda w: w.replace([*chat(150), *chat(150, "new")]),
    ],
    ids=["splice", "truncate", "replace"],
)
def test_a_rewrite_between_pages_makes_the_read_again(
    interrupted: tuple[Interrupted, RedisHistory], rewrite: Callable[[RedisHistory], Any]
) -> None:
    reader, writer = interrupted
    reader.between = [lambda: rewrite(writer)]
    assert ids(reader.snapshot()) == ids(writer.snapshot())
    assert ids(reader.snapshot()) != ids(chat(300))
    assert Interrupted.batches > 2  # the length and first pages, the rest; then again


def test_a_conversation_deleted_and_written_again_between_pages_is_read_again(
    interrupted: tuple[Interrupted, RedisHistory],
) -> None:
    reader, writer = interrupted

    def anew() -> None:  # its version starts over, as it was: only the entries differ
        writer.delete()
        writer.append_many(chat(300, "other"))

    reader.between = [anew]
    assert ids(reader.snapshot()) == ids(chat(300, "other"))
    assert Interrupted.batches == 4


def test_a_read_that_rewrites_keep_changing_gives_up_whole(
    interrupted: tuple[Interrupted, RedisHistory],
) -> None:
    reader, writer = interrupted
    rounds = iter(range(1_000))
    reader.between = [lambda: writer.replace(chat(300, f"r{next(rounds)}"))] * 100
    with pytest.raises(HistoryError, match=f"each of {READ_ATTEMPTS} reads"):
        reader.snapshot()
    assert Interrupted.batches == 2 * READ_ATTEMPTS


def test_an_export_reads_a_long_archive_in_pages(logged: redis.Redis) -> None:
    history = RedisHistory(logged, "c")
    history.append_many(chat(400))
    history.splice_prefix(300, [Message.system("summary", id="s")])
    commands = commands_of(logged, lambda: read_dump(history))
    ranges = [command for command in commands if command[0] == b"LRANGE"]
    assert max(map(span, ranges)) <= PAGE_ENTRIES
    dump = read_dump(history)
    assert [entry.message.id for entry in dump.archive] == ids(chat(300))
    assert [entry.message.id for entry in dump.live] == ["s", *ids(chat(400))[300:]]


def test_pages_overlap_by_one_and_end_at_the_range() -> None:
    assert _pages._pages(0, 200, 10, overlap=False) == [(0, 63), (63, 126), (126, 189), (189, 200)]
    assert _pages._pages(253, 300, 10, overlap=True) == [(252, 300)]
    assert _pages._pages(0, None, 2, overlap=False) == [(0, 63), (63, 126)]


def test_a_list_read_before_is_read_in_one_round_trip(logged: redis.Redis) -> None:
    """The length the process's last whole read found is a hint of how many pages to ask for
    at once: with it a long list is one round trip (the version twice, the length), no page
    twice, whichever history reads it."""
    history = RedisHistory(logged, "c")
    history.append_many(chat(1_000))
    history.snapshot()
    history.append_many(chat(30, "more"))  # a page past the hint is asked for, for these
    commands = commands_of(logged, RedisHistory(logged, "c").snapshot)
    assert [command[0] for command in commands].count(b"HGET") == 2
    assert commands[1][0] == b"LLEN"
    assert sum(map(span, commands[2:-1])) <= 1_030 + len(commands[2:-1]) + 2 * PAGE_ENTRIES
    assert ids(history.snapshot()) == ids(chat(1_000)) + ids(chat(30, "more"))
    shorter = RedisHistory(logged, "c")
    shorter.truncate(10)
    assert ids(history.snapshot()) == ids(chat(10))  # a hint past the end costs nothing else
