"""``history.fork()``: a new conversation holding a prefix of another, copied at one version,
on every Redis backend; refusals write nothing; concurrent writers never tear a copy."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from backends import HistoryFactory, SyncOverAsync
from redis.cluster import RedisCluster

from redis_history import (
    CompactionState,
    CompactionStats,
    ConversationExistsError,
    HistoryError,
    LimitExceededError,
    Message,
    MessageNotFoundError,
    RedisHistory,
    RoleOrderError,
    StaleSnapshotError,
    ToolCall,
    ToolPairingError,
    limits,
)
from redis_history.store import _fork, codec


def turn(i: int | str) -> list[Message]:
    """A question, two parallel tool calls, their results, the answer; ids name each."""
    return [
        Message.user(f"q{i}", id=f"q{i}"),
        Message.assistant(
            "",
            id=f"call{i}",
            tool_calls=[ToolCall(id=f"c{i}a", name="f"), ToolCall(id=f"c{i}b", name="g")],
        ),
        Message.tool(f"ra{i}", id=f"ra{i}", tool_call_id=f"c{i}a"),
        Message.tool(f"rb{i}", id=f"rb{i}", tool_call_id=f"c{i}b"),
        Message.assistant(f"a{i}", id=f"a{i}"),
    ]


def conversation(n: int) -> list[Message]:
    """A system prompt and ``n`` turns."""
    return [Message.system("be brief", id="sys")] + [m for i in range(n) for m in turn(i)]


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def forked(history: Any, new_conversation_id: str, **options: Any) -> Any:
    """``history.fork(...)``; an asyncio history's fork driven as the history itself is."""
    copy = history.fork(new_conversation_id, **options)
    if isinstance(history, SyncOverAsync):
        return SyncOverAsync(copy, history._runner)
    return copy


@pytest.fixture
def make(make_history: HistoryFactory, request: pytest.FixtureRequest) -> HistoryFactory:
    """Every Redis backend of the contract suite (sync, asyncio, cluster, staged)."""
    if request.node.callspec.params["make_history"] == "memory":
        pytest.skip("InMemoryHistory holds one conversation: a fork needs a store")
    return make_history


def test_a_fork_copies_exactly_the_prefix_and_leaves_the_source_alone(
    make: HistoryFactory,
) -> None:
    """The copy holds the messages up to ``at`` as stored (ids, contents, token counts), the
    prefix's token total, the source's TTL and a fresh compaction state; the source is as
    it was; the copy is a history of the same kind with the same options."""
    source = make("src", ttl=600, max_message_bytes=4096)
    messages = conversation(3)
    source.append_many(messages)
    source.compaction_event("compacted", 2, 40)  # not carried: the copy's compaction is fresh
    source.record_input_tokens(1000)
    entries, estimate = source.entries(), source.token_estimate()

    copy = forked(source, "copy", at="a1")
    assert (copy.namespace, copy.conversation_id) == (source.namespace, "copy")
    assert type(getattr(copy, "_history", copy)) is type(getattr(source, "_history", source))
    assert copy.entries() == entries[:11]
    assert copy.token_estimate() == sum(e.tokens for e in entries[:11])  # the baseline was later
    assert copy.compaction_state() == CompactionState()
    assert copy.compaction_stats() == CompactionStats(0, 0)
    assert copy.ttl() == 600
    assert copy.core.max_message_bytes == 4096
    assert source.entries() == entries
    assert source.token_estimate() == estimate == 1000

    whole = forked(source, "whole", at="a2", namespace="elsewhere")
    assert whole.namespace == "elsewhere"
    assert whole.entries() == entries
    assert whole.token_estimate() == 1000, "the baseline was recorded on the prefix: it holds"


def test_the_copy_takes_the_next_turn_checked_against_its_own_state(make: HistoryFactory) -> None:
    """Appending to a fork checks role order and tool pairing against the copied prefix,
    not the source's tail."""
    source = make("src")
    source.append_many(conversation(2))
    after_answer = forked(source, "after-answer", at="a0")
    with pytest.raises(RoleOrderError):
        after_answer.append(Message.assistant("again"))
    with pytest.raises(ToolPairingError):
        after_answer.append(Message.tool("late", tool_call_id="c0a"))
    after_answer.append(Message.user("another question", id="branch"))
    assert ids(after_answer.snapshot()) == ["sys", *ids(turn(0)), "branch"]

    after_results = forked(source, "after-results", at="rb1")  # every call of the step answered
    with pytest.raises(RoleOrderError):
        after_results.append(Message.user("interrupting"))
    after_results.append(Message.assistant("a different answer"))
    assert source.len() == 11


def test_a_fork_that_would_part_a_call_from_its_result_is_refused(make: HistoryFactory) -> None:
    """``at`` on a calling assistant message, or on a result while another call of the same
    message is unanswered, is refused; after the last result it is not, nor in a history
    that does not validate."""
    source = make("src")
    source.append_many(conversation(1))
    for at in ("call0", "ra0"):
        with pytest.raises(ToolPairingError, match="would part tool calls") as refused:
            forked(source, f"at-{at}", at=at)
        assert refused.value.conversation_id == "src"
        with pytest.raises(MessageNotFoundError):  # nothing was made
            forked(source, f"at-{at}", at="no such id")
    assert ids(forked(source, "at-rb0", at="rb0").snapshot()) == ids(conversation(1))[:5]
    loose = make("loose", validate=False)  # checks nothing, as its truncate does not
    loose.append_many(conversation(1))
    assert forked(loose, "loose-call0", at="call0").len() == 3


def test_a_fork_after_compaction_copies_the_live_list_and_the_archive(
    make: HistoryFactory,
) -> None:
    """The summaries compaction left are copied as summaries, the archive with them (so the
    copy's transcript is the source's record up to ``at``, at the same positions); an
    archived message is not a live one to fork at."""
    source = make("src")
    source.append_many(conversation(3))
    first = source.turns()[0].to_messages()
    summary = Message.system("Summary: the first question.", id="summary")
    source.splice_prefix(len(first), summary, expected_ids=ids(first), archive_max_messages=4)

    copy = forked(source, "copy", at="a1")
    assert copy.entries() == source.entries()[:6]
    assert copy.entries()[0].summary
    record = ids(source.transcript())
    assert ids(copy.transcript()) == record[: record.index("a1") + 1]
    assert copy.transcript_page(0, 3) == source.transcript_page(0, 3)
    with pytest.raises(MessageNotFoundError, match="no live message"):
        forked(source, "archived", at="q0")
    at_summary = forked(source, "at-summary", at="summary")
    at_summary.append(Message.user("go on"))
    assert ids(at_summary.snapshot()) == ["summary", at_summary.snapshot()[1].id]


def everything(client: Any) -> dict[Any, Any]:
    """Every key's serialized value: equal before and after means nothing was written."""
    return {key: client.dump(key) for key in sorted(client.scan_iter())}


def test_refused_forks_write_nothing(sync_client: Any) -> None:
    """A target that exists, an unknown or archived ``at``, an ``at`` parting a call from its
    result, and unusable names are refused with typed errors, every key as it was."""
    source = RedisHistory(sync_client, "src", ttl=600)
    source.append_many(conversation(2))
    first = source.turns()[0].to_messages()
    source.splice_prefix(len(first), Message.system("s", id="s"), expected_ids=ids(first))
    source.append_many(turn(2)[:3])  # the last step's second call is unanswered
    RedisHistory(sync_client, "taken").append(Message.user("mine"))
    before = everything(sync_client)
    refusals: list[tuple[type[Exception], dict[str, Any]]] = [
        (ConversationExistsError, {"new_conversation_id": "taken", "at": "a1"}),
        (MessageNotFoundError, {"at": "nowhere"}),
        (MessageNotFoundError, {"at": "a0"}),  # archived
        (ToolPairingError, {"at": "call1"}),
        (ToolPairingError, {"at": "ra2"}),  # the tail: its call's other result is to come
        (ValueError, {"new_conversation_id": "a{b}"}),
        (ValueError, {"new_conversation_id": ""}),
        (ValueError, {"namespace": "a:b"}),
        (ValueError, {"at": ""}),
        (LimitExceededError, {"at": "x" * 300}),
    ]
    for error, options in refusals:
        with pytest.raises(error):
            source.fork(**{"new_conversation_id": "new", "at": "a1", **options})
        assert everything(sync_client) == before, f"{error.__name__} {options} wrote"
    assert sync_client.exists(*source.fork("new", at="a1").keys.data) == 3


def test_an_interrupt_at_the_last_write_leaves_no_staged_copy(
    sync_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt (not an ``Exception``) raised as the staged copy is put in place reaches
    the caller, and the fork removes what it staged first: nothing of the target is left."""
    source = RedisHistory(sync_client, "src")
    source.append_many(conversation(2))
    before = everything(sync_client)
    execute = RedisHistory.execute

    def interrupted(self: RedisHistory, call: Any) -> Any:
        if call.script is not None and call.script.name == "restore":
            raise KeyboardInterrupt
        return execute(self, call)

    monkeypatch.setattr(RedisHistory, "execute", interrupted)
    with pytest.raises(KeyboardInterrupt):
        source.fork("new", at="a1")
    assert everything(sync_client) == before


def test_a_target_made_while_the_fork_read_is_refused_at_the_end(sync_client: Any) -> None:
    """The final script refuses a target that appeared after the fork looked: the other
    writer's conversation stays as it wrote it, and no staging key is left."""
    source = RedisHistory(sync_client, "src")
    source.append_many(conversation(1))
    rival = RedisHistory(sync_client, "new")
    read = source.execute

    def read_then_rival(call: Any) -> Any:
        if call.script is not None and call.script.name == "read_prefix" and not rival.len():
            rival.append(Message.user("first"))
        return read(call)

    source.execute = read_then_rival  # type: ignore[method-assign]
    with pytest.raises(ConversationExistsError) as refused:
        source.fork("new", at="a0")
    assert refused.value.conversation_id == "new"
    assert [m.content for m in rival.snapshot()] == ["first"]
    assert not [key for key in sync_client.scan_iter() if b":restore:" in key]


def test_a_fork_whose_writes_are_sent_twice_is_applied_once(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write of a fork applied, its reply lost and the write sent again (as redis-py
    does): a staged chunk is not pushed twice, and the final script answers as it did the
    first time instead of finding its own conversation there."""
    source = RedisHistory(client, "src")
    source.append_many(conversation(2))
    execute = RedisHistory.execute

    def twice(self: RedisHistory, call: Any) -> Any:
        if call.script is not None and call.script.name in ("stage", "restore"):
            execute(self, call)  # applied; the reply was lost
        return execute(self, call)

    monkeypatch.setattr(RedisHistory, "execute", twice)
    copy = source.fork("copy", at="a1")
    assert copy.entries() == source.entries()


# -- one version, read in chunks -------------------------------------------------------------


def interleaved(source: RedisHistory, writes: dict[int, Callable[[], Any]]) -> None:
    """Run ``writes[n]`` (another pod's write) just before the source's ``n``-th fork read."""
    read, count = source.execute, [0]

    def execute(call: Any) -> Any:
        if call.script is not None and call.script.name == "read_prefix":
            count[0] += 1
            if count[0] in writes:
                writes[count[0]]()
        return read(call)

    source.execute = execute  # type: ignore[method-assign]


@pytest.fixture
def chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork reads of 4 entries each, so that a short conversation takes several."""
    monkeypatch.setattr(_fork, "MAX_BATCH_MESSAGES", 4)


@pytest.mark.usefixtures("chunked")
def test_a_rewrite_between_two_reads_makes_the_fork_read_that_version_again(
    client: redis.Redis,
) -> None:
    """A compaction between the fork's reads (live list, then archive) does not tear the copy:
    it is the new version's prefix, and its transcript the record up to ``at``."""
    source = RedisHistory(client, "src")
    source.append_many(conversation(3))
    other = RedisHistory(client, "src")

    def compact() -> None:
        first = other.turns()[0].to_messages()
        other.splice_prefix(len(first), Message.system("s"), expected_ids=ids(first))

    interleaved(source, {2: compact, 6: compact})  # a live read, then an archive read
    copy = source.fork("copy", at="a2")
    assert copy.entries() == source.entries()
    assert ids(copy.transcript()) == ids(source.transcript()) == ids(conversation(3))


@pytest.mark.usefixtures("chunked")
def test_a_conversation_deleted_and_written_again_between_two_reads_is_read_again(
    client: redis.Redis,
) -> None:
    """Written again from nothing, the source has its first version number again, even with
    the same message ids at the same positions: the entry last read, no longer byte for byte
    at its position (written at another time), makes the fork read again."""
    source = RedisHistory(client, "src")
    source.append_many(conversation(2))
    other = RedisHistory(client, "src")
    later = timedelta(seconds=1)
    again = [
        m.model_copy(update={"created_at": m.created_at + later})
        for m in [Message.system("be verbose", id="sys"), *turn(0), *turn(1)]
    ]

    def rewrite() -> None:
        other.delete()
        other.append_many(again)

    interleaved(source, {2: rewrite})
    copy = source.fork("copy", at="a1")
    assert copy.snapshot() == again


@pytest.mark.usefixtures("chunked")
def test_a_source_rewritten_before_every_read_is_not_forked(client: redis.Redis) -> None:
    """When rewrites come between the reads of every attempt, the fork gives up: a
    HistoryError that says so, and nothing written."""
    source = RedisHistory(client, "src")
    source.append_many(conversation(3))
    other = RedisHistory(client, "src")

    def rewrite() -> None:
        other.replace(other.snapshot())

    interleaved(source, dict.fromkeys(range(2, 100, 2), rewrite))
    before = everything(client)
    with pytest.raises(HistoryError, match="rewritten during each of 5 reads"):
        source.fork("copy", at="a2")
    assert set(everything(client)) == set(before)


# -- concurrent writers --------------------------------------------------------------------


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.real_redis), "cluster"])
def connect(request: pytest.FixtureRequest) -> Callable[[], Any]:
    """New clients of a flushed real Redis, or of the local Redis Cluster."""
    if request.param == "redis":
        request.getfixturevalue("real_redis")
        return request.getfixturevalue("redis_server").client  # type: ignore[no-any-return]
    request.getfixturevalue("cluster_client")
    return request.getfixturevalue("redis_cluster").client  # type: ignore[no-any-return]


PODS = 3
TURNS = 40
FORKS = 30


@pytest.mark.real_redis
def test_forks_taken_while_pods_append_and_compact_are_prefixes_of_one_version(
    connect: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods append whole turns and a worker compacts while forks are taken at recent
    messages, each read in several fenced chunks: every fork ends at its ``at`` and its
    record (archive and live list) is the source's final record up to ``at``. A refusal is
    for a call parted from its result, an ``at`` compaction moved away, or a source
    rewritten during every read."""
    monkeypatch.setattr(_fork, "MAX_BATCH_MESSAGES", 32)
    clients = [connect() for _ in range(PODS + 2)]
    source = RedisHistory(clients[0], "src")
    source.append(Message.system("be brief", id="sys"))
    stop = threading.Event()
    appended = [0] * PODS

    def pod(n: int) -> None:
        history = RedisHistory(clients[n + 1], "src")
        while appended[n] < TURNS and not stop.wait(0.005):
            history.append_many(turn(f"{n}-{appended[n]}"))
            appended[n] += 1

    def compactor() -> None:
        history = RedisHistory(clients[-1], "src")
        while not stop.wait(0.005):
            turns = history.turns()
            if len(turns) > 3:
                first = turns[0].to_messages()
                with contextlib.suppress(StaleSnapshotError):
                    history.splice_prefix(len(first), Message.system("s"), expected_ids=ids(first))

    threads = [threading.Thread(target=pod, args=(n,)) for n in range(PODS)]
    threads.append(threading.Thread(target=compactor))
    for thread in threads:
        thread.start()
    rng = random.Random(7)
    forks: list[tuple[str, RedisHistory]] = []
    parted: list[str] = []
    moved: list[str] = []
    busy: list[str] = []
    try:
        for n in range(FORKS):
            recent = [e.message.id for e in source.entries()[-12:] if not e.summary]
            at = rng.choice(recent)
            try:
                forks.append((at, source.fork(f"fork-{n}", at=at)))
            except ToolPairingError:
                parted.append(at)
            except MessageNotFoundError:
                moved.append(at)
            except HistoryError as exc:
                busy.append(str(exc))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for client in clients[1:]:
            client.close()
    last = source.snapshot()[-1].id
    forks.append((last, source.fork("fork-last", at=last)))

    record = ids(source.transcript())
    assert len(record) == 1 + sum(appended) * 5
    for at, copy in forks:
        assert copy.snapshot()[-1].id == at
        assert ids(copy.transcript()) == record[: record.index(at) + 1]
    assert all(at.startswith(("call", "ra")) for at in parted)
    assert all("rewritten during each" in error for error in busy)
    assert not set(moved) & set(ids(source.snapshot()))
    if isinstance(source.client, RedisCluster):
        cluster: Any = source.client  # redis-py's cluster methods are untyped
        slot = cluster.keyslot(source.keys.msgs)
        assert any(cluster.keyslot(c.keys.msgs) != slot for _, c in forks)


# -- no call holds Redis for long ----------------------------------------------------------


ENTRY = limits.MAX_MESSAGE_BYTES - 1024
"""The text of a message as large as a history may store."""


def alternating(n: int, start: int, text: Callable[[int], str] = str) -> list[Message]:
    return [
        Message.user(text(i), id=f"m{i}") if i % 2 == 0 else Message.assistant(text(i), id=f"m{i}")
        for i in range(start, start + n)
    ]


@pytest.mark.real_redis
@pytest.mark.slow
def test_a_fork_of_the_largest_reads_and_writes_stays_under_250_ms(
    server_cpu: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork reads and writes in chunks no larger than one write of the store: a prefix of
    10,000 messages and 12 MiB more over an archive of 10,000, each call under 250 ms. (The
    texts are kept as JSON, the largest stored form: compressed, each would be a few KB.)"""
    monkeypatch.setattr(codec, "COMPRESS_BYTES", limits.MAX_MESSAGE_BYTES + 1)
    source = RedisHistory(server_cpu, "src", max_message_bytes=limits.MAX_MESSAGE_BYTES)
    batch = limits.MAX_BATCH_MESSAGES
    source.append_many(alternating(batch, 0))
    source.append_many(alternating(batch, batch))
    source.append_many(alternating(6, 2 * batch, lambda i: "x" * ENTRY))
    source.append_many(alternating(6, 2 * batch + 6, lambda i: "y" * ENTRY))
    source.append_many(alternating(2, 2 * batch + 12))
    source.splice_prefix(batch, Message.system("s"))
    reads: list[int] = []
    interleaved(source, {n: lambda: reads.append(1) for n in range(1, 100)})
    at = f"m{2 * batch + 12}"
    copy = source.fork("copy", at=at)
    assert len(reads) >= 4, "10,000 entries, 8 MiB at most, then the rest; then the archive"
    assert copy.len() == source.len() - 1
    assert copy.snapshot()[-1].id == at
    assert server_cpu.llen(copy.keys.archive) == batch
