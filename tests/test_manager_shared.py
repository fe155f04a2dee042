"""HistoryManager with ``history=``: summaries kept in the conversation's keys reach every
pod, each records the messages it covers, and pods completing one turn summarize it once."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from samples import STAGED_TEXT
from summarizers_for_tests import Counting

from redis_history import (
    CorruptHistoryError,
    LimitExceededError,
    Message,
    RedisHistory,
    limits,
)
from redis_history.compaction_policy import CompactionContext
from redis_history.context import HistoryManager, HistoryManagerConfig, Strategy
from redis_history.context import manager as manager_module
from redis_history.demo.server import RedisServer
from redis_history.store.summaries import (
    DIGEST_BYTES,
    SummaryCore,
    message_digest,
    span_digest,
)

PROMPT = "You are a travel agent."
STRATEGIES: tuple[Strategy, ...] = ("sliding_window", "token_budget", "summary_and_tail")


def pod(
    client: Any,
    summarizer: Counting,
    strategy: Strategy = "token_budget",
    conversation: str = "conv-1",
    **options: Any,
) -> tuple[RedisHistory, HistoryManager]:
    """A pod's history and manager on the shared conversation."""
    history = RedisHistory(client, conversation, namespace="tenant-a")
    config = HistoryManagerConfig(
        strategy=strategy, enable_summarization=True, token_counter="o200k_base", **options
    )
    return history, HistoryManager(config, history=history).with_summarizer(summarizer)


def fill(history: RedisHistory, turns: int) -> None:
    history.append(Message.system(PROMPT))
    for i in range(turns):
        history.append_many([Message.user(f"question {i} " * 20), Message.assistant("ok " * 20)])


def turn_request(manager: HistoryManager, history: RedisHistory) -> Any:
    """The next turn's request, with room for about two turns of history."""
    return manager.prepare_messages(260, PROMPT, history.snapshot(), [Message.user("next?")])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_summary_one_pod_makes_is_in_the_next_request_of_another(
    sync_client: Any, strategy: Strategy
) -> None:
    """Pod A summarizes what its request left out; pod B's next request sends it, though B
    never summarized, and ``summaries()`` on either reads it."""
    summarizer = Counting()
    history_a, manager_a = pod(sync_client, summarizer, strategy, window_turns=3)
    history_b, manager_b = pod(sync_client, summarizer, strategy, window_turns=3)
    fill(history_a, 6)
    prepared = turn_request(manager_a, history_a)
    assert prepared.dropped
    summary = manager_a.on_turn_complete(prepared.dropped, "agent-1")
    assert summary is not None
    assert manager_b.summaries() == manager_a.summaries() == [summary]
    request = turn_request(manager_b, history_b)
    assert request.messages[0].content == f"{PROMPT}\n\n{summary}"
    assert request.diagnostics.summaries > 0
    assert manager_b.on_turn_complete(request.dropped, "agent-1") is None  # all covered
    assert summarizer.calls == [[m.id for m in prepared.dropped]]


def test_each_summary_records_the_run_it_covers(client: redis.Redis) -> None:
    """The stored summary names the run of messages it covers (its first id, its length, the
    digest of its ids), and the next summary covers only what was evicted since."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 5)
    first = turn_request(manager, history)
    manager.on_turn_complete(first.dropped, "agent-1")
    fill_more = [Message.user("question 5 " * 20), Message.assistant("ok " * 20)]
    history.append_many(fill_more)
    second = turn_request(manager, history)
    manager.on_turn_complete(second.dropped, "agent-1")
    stored = history.execute(SummaryCore(history.keys, "conv-1", "tenant-a").read())
    runs = [
        [m.id for m in first.dropped],
        [m.id for m in second.dropped if m not in first.dropped],
    ]
    assert [(s.first, s.count, s.digest) for s in stored] == [
        (run[0], len(run), span_digest(run)) for run in runs
    ]
    assert [s.text for s in stored] == manager.summaries()


def test_seeded_summaries_go_first_and_stay_in_the_process(client: redis.Redis) -> None:
    """``with_summaries`` seeds this manager's requests, before the shared summaries; other
    pods do not see the seeds."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    _, other = pod(client, summarizer)
    fill(history, 5)
    summary = manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    manager.with_summaries(["Seeded: the user is vegetarian."])
    request = turn_request(manager, history)
    assert request.messages[0].content == (
        f"{PROMPT}\n\nSeeded: the user is vegetarian.\n\n{summary}"
    )
    assert other.summaries() == [summary]


def test_without_history_the_summaries_stay_in_the_process(client: redis.Redis) -> None:
    """A manager given no history writes nothing to Redis."""
    summarizer = Counting()
    history, _ = pod(client, summarizer)
    fill(history, 5)
    config = HistoryManagerConfig(enable_summarization=True, token_counter="o200k_base")
    local = HistoryManager(config).with_summarizer(summarizer)
    summary = local.on_turn_complete(turn_request(local, history).dropped, "agent-1")
    assert local.summaries() == [summary]
    assert not client.exists(history.keys.summaries)


def test_the_summaries_follow_the_conversations_ttl_and_go_with_it(client: redis.Redis) -> None:
    """The summaries hash carries the conversation's TTL, ``delete`` removes it, and one left
    behind by a conversation that expired is read as nothing and deleted."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 5)
    history.set_ttl(600)
    manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    assert 0 < client.pttl(history.keys.summaries) <= 600_000
    history.set_ttl(None)
    assert manager.summaries()
    assert client.pttl(history.keys.summaries) == -1
    assert history.delete()
    assert not client.exists(history.keys.summaries)
    fill(history, 5)
    manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    client.delete(history.keys.msgs, history.keys.meta)  # as if expired
    assert manager.summaries() == []
    assert not client.exists(history.keys.summaries)


def test_no_conversation_no_summaries_hash(client: redis.Redis) -> None:
    """Messages evicted from a conversation that no longer exists are summarized by no pod
    and write nothing."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 5)
    dropped = turn_request(manager, history).dropped
    history.delete()
    assert manager.on_turn_complete(dropped, "agent-1") is None
    assert summarizer.calls == []
    assert not client.exists(history.keys.summaries)


def test_a_crashed_pods_claim_expires(client: redis.Redis) -> None:
    """Messages claimed by a pod that never stored a summary are claimed again once its
    claim expires, not before; a retried claim gets its own messages again (and extends it)."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    ids = [m.id for m in history.snapshot()]
    assert history.execute(core.claim(ids, token="a", now_ms=1_000, claim_ms=5_000)) == [0, 1, 2]
    assert history.execute(core.claim(ids, token="a", now_ms=1_001, claim_ms=5_000)) == [0, 1, 2]
    assert history.execute(core.claim(ids, token="b", now_ms=6_000, claim_ms=5_000)) == []
    assert history.execute(core.claim(ids, token="b", now_ms=6_001, claim_ms=5_000)) == [0, 1, 2]


def test_a_retried_store_is_applied_once(client: redis.Redis) -> None:
    """A store repeated with its token (a reply lost, redis-py re-sending) keeps one summary."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    ids = [m.id for m in history.snapshot()]
    history.execute(core.claim(ids, token="a", now_ms=0, claim_ms=5_000))
    first = history.execute(core.store("Previously: hello.", ids, token="a", kept=4))
    assert history.execute(core.store("Previously: hello.", ids, token="a", kept=4)) == first
    assert [s.text for s in history.execute(core.read())] == ["Previously: hello."]


def test_past_the_cap_the_oldest_summary_goes_and_its_messages_stay_summarized(
    client: redis.Redis,
) -> None:
    """With ``max_summaries`` kept, a new one drops the oldest; the messages the dropped one
    covered are not summarized again."""
    summarizer = Counting()
    history, manager = pod(client, summarizer, max_summaries=2)
    fill(history, 4)
    for i in range(4, 8):
        manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
        history.append_many([Message.user(f"question {i} " * 20), Message.assistant("ok " * 20)])
    manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    assert len(summarizer.calls) == 5
    assert len(manager.summaries()) == 2
    assert manager.summaries()[-1].startswith("Previously: question 5")
    covered = [i for call in summarizer.calls for i in call]
    assert len(covered) == len(set(covered))  # no message summarized twice


def test_summaries_over_the_limits_are_refused_before_anything_is_sent(
    client: redis.Redis,
) -> None:
    """A summary over ``MAX_SUMMARY_BYTES``, over ``MAX_SUMMARY_MESSAGES`` ids, a claim over
    ``MAX_SUMMARY_CANDIDATES`` and a cap over ``MAX_SUMMARIES`` raise; nothing is written."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    with pytest.raises(LimitExceededError, match="bytes"):
        core.store("é" * limits.MAX_SUMMARY_BYTES, ["a"], token="t", kept=4)
    with pytest.raises(LimitExceededError, match="covers"):
        core.store("x", ["a"] * (limits.MAX_SUMMARY_MESSAGES + 1), token="t", kept=4)
    with pytest.raises(LimitExceededError, match="offered"):
        core.claim(["a"] * (limits.MAX_SUMMARY_CANDIDATES + 1), token="t", now_ms=0, claim_ms=1)
    with pytest.raises(ValidationError):
        HistoryManagerConfig(max_summaries=limits.MAX_SUMMARIES + 1)
    assert not client.exists(history.keys.summaries)


def test_only_a_history_keeps_the_summaries(client: redis.Redis) -> None:
    """Only a ``RedisHistory`` or an ``AsyncRedisHistory`` keeps the summaries; anything else
    is a ``TypeError``."""
    with pytest.raises(TypeError, match="history must be RedisHistory or AsyncRedisHistory"):
        HistoryManager(history=object())  # type: ignore[arg-type]


@pytest.mark.real_redis
def test_four_pods_completing_one_turn_summarize_it_once(redis_server: RedisServer) -> None:
    """Four pods, each on its own connection, complete the same turn at once: the summarizer
    runs once, and every pod's next request carries its summary."""
    setup = redis_server.client()
    setup.flushall()
    summarizer = Counting()
    fill(RedisHistory(setup, "conv-1", namespace="tenant-a"), 6)
    pods = [pod(redis_server.client(), summarizer) for _ in range(4)]
    requests = [turn_request(manager, history) for history, manager in pods]
    assert all(r.dropped == requests[0].dropped for r in requests)
    start = threading.Barrier(len(pods))
    results: list[str | None] = [None] * len(pods)

    def complete(i: int) -> None:
        start.wait()
        results[i] = pods[i][1].on_turn_complete(requests[i].dropped, "agent-1")

    threads = [threading.Thread(target=complete, args=(i,)) for i in range(len(pods))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(summarizer.calls) == 1
    [summary] = [r for r in results if r is not None]
    for history, manager in pods:
        assert turn_request(manager, history).messages[0].content == f"{PROMPT}\n\n{summary}"


def test_a_summary_compaction_replaced_in_part_is_not_sent_and_its_live_part_is_redone(
    client: redis.Redis,
) -> None:
    """Once compaction splices a summary over some of the messages a manager summary covers,
    requests carry compaction's summary and not the manager's; the next ``on_turn_complete``
    drops the manager's and summarizes its messages still live, so no message is covered by
    two summaries of one request."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 6)
    first = turn_request(manager, history)
    manager_summary = manager.on_turn_complete(first.dropped, "agent-1")
    assert manager_summary is not None
    assert len(first.dropped) > 3
    compacted = Message.system(
        f"{PROMPT}\n\nCompacted: the first two questions.",
        metadata={"summary": True, "system_prompt": PROMPT},
    )
    history.splice_prefix(5, compacted)  # the prompt and the first two turns
    request = turn_request(manager, history)
    system = request.messages[0].content
    assert "Compacted: the first two questions." in system
    assert manager_summary not in system
    redone = manager.on_turn_complete(request.dropped, "agent-1")
    assert redone is not None
    live = {m.id for m in history.snapshot()}
    assert set(summarizer.calls[-1]) <= live
    assert set(summarizer.calls[-1]) >= {m.id for m in first.dropped[4:]}  # after the cut
    assert manager.summaries() == [redone]
    final = turn_request(manager, history).messages[0].content
    assert final == f"{PROMPT}\n\nCompacted: the first two questions.\n\n{redone}"


def test_a_store_whose_claim_another_pod_took_writes_nothing(client: redis.Redis) -> None:
    """A store under a claim that expired and was taken by another pod, wholly or in part, is
    refused (``None``) with the hash as it was; the taker's store is the only summary, and the
    messages nobody took are claimed again. A claim that expired untaken still stores."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 2)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    ids = [m.id for m in history.snapshot()]
    assert history.execute(core.claim(ids[:3], token="a", now_ms=0, claim_ms=5_000)) == [0, 1, 2]
    assert history.execute(core.claim(ids[1:3], token="b", now_ms=5_000, claim_ms=5_000)) == [
        0,
        1,
    ]
    before = client.hgetall(history.keys.summaries)
    assert history.execute(core.store("A's.", ids[:3], token="a", kept=4)) is None
    assert client.hgetall(history.keys.summaries) == before
    assert history.execute(core.store("B's.", ids[1:3], token="b", kept=4)) == 1
    assert history.execute(core.claim(ids, token="c", now_ms=5_000, claim_ms=1)) == [0]
    assert history.execute(core.store("C's.", ids[:1], token="c", kept=4)) == 2  # expired, untaken
    assert [s.text for s in history.execute(core.read())] == ["B's.", "C's."]
    assert history.execute(core.claim(ids, token="d", now_ms=9_000, claim_ms=1)) == [3, 4]


class Clock:
    """The manager's ``time``: a clock the test moves, not one it waits on."""

    def __init__(self) -> None:
        self.ns = 1_700_000_000 * 10**9

    def time_ns(self) -> int:
        return self.ns


def test_a_pod_whose_summarizer_outlives_its_claim_stores_nothing(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pod A's summarizer runs past ``summary_claim_seconds`` and pod B claims and summarizes
    the same messages meanwhile: A stores nothing and returns ``None``, so every next request
    carries one summary of them, not two."""
    clock = Clock()
    monkeypatch.setattr(manager_module, "time", clock)
    history_b, manager_b = pod(client, Counting(), summary_claim_seconds=1)
    fill(history_b, 6)
    dropped = turn_request(manager_b, history_b).dropped
    taken: list[str | None] = []

    class Outlived(Counting):
        def summarize(
            self, messages: Sequence[Message], *, context: CompactionContext | None = None
        ) -> str:
            clock.ns += 2 * 10**9  # past A's claim, while A summarizes
            taken.append(manager_b.on_turn_complete(dropped, "agent-1"))
            return super().summarize(messages, context=context)

    history_a, manager_a = pod(client, Outlived(), summary_claim_seconds=1)
    assert manager_a.on_turn_complete(dropped, "agent-1") is None
    [summary] = taken
    assert summary is not None
    assert manager_a.summaries() == [summary]
    assert turn_request(manager_a, history_a).messages[0].content == f"{PROMPT}\n\n{summary}"


def test_a_summary_covers_one_run_and_the_next_turn_takes_the_rest(client: redis.Redis) -> None:
    """A claim takes the oldest run of free messages (a message another pod holds ends it); a
    summary whose run is no longer whole in the history (a message in it replaced) is stale."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 2)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    ids = [m.id for m in history.snapshot()]
    assert history.execute(core.claim(ids[2:3], token="b", now_ms=0, claim_ms=5_000)) == [0]
    assert history.execute(core.claim(ids, token="a", now_ms=0, claim_ms=5_000)) == [0, 1]
    assert history.execute(core.claim(ids, token="c", now_ms=0, claim_ms=5_000)) == [3, 4]
    history.execute(core.store("A's.", ids[:2], token="a", kept=4))
    [stored] = history.execute(core.read())
    messages = history.snapshot()
    positions = {m.id: i for i, m in enumerate(messages)}
    assert stored.covers(positions, ids)
    edited = [*ids[:1], "another", *ids[2:]]
    assert not stored.covers({i: n for n, i in enumerate(edited)}, edited)
    assert not stored.covers(positions, ids[:1])  # the run cut short


@pytest.mark.real_redis
def test_a_conversation_written_past_its_ttl_keeps_its_summaries(real_redis: redis.Redis) -> None:
    """``set_ttl`` gives the summaries key the conversation's TTL, and ``set_ttl(None)`` takes it
    away, without a manager reading them."""
    history, manager = pod(real_redis, Counting())
    fill(history, 6)
    assert manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    assert real_redis.pttl(history.keys.summaries) == -1
    history.set_ttl(600)
    assert 0 < real_redis.pttl(history.keys.summaries) <= 600_000
    history.set_ttl(None)
    assert real_redis.pttl(history.keys.summaries) == -1


WRITES: dict[str, Callable[[RedisHistory], object]] = {
    "append": lambda h: h.append(Message.user("again")),
    "append_many": lambda h: h.append_many([Message.user("u"), Message.assistant("a")] * 20),
    "a staged append": lambda h: h.append(Message.user(STAGED_TEXT)),
    "replace": lambda h: h.replace(h.snapshot()),
    "splice_prefix": lambda h: h.splice_prefix(1, Message.system(PROMPT)),
    "truncate": lambda h: h.truncate(4),
    "rollback": lambda h: h.rollback([h.snapshot()[-1].id]),
    "record_input_tokens": lambda h: h.record_input_tokens(10),
    "compaction_event": lambda h: h.compaction_event("compacted", 1),
    "set_ttl": lambda h: h.set_ttl(600),
}


@pytest.mark.real_redis
@pytest.mark.parametrize("write", WRITES)
def test_every_write_of_the_conversation_refreshes_the_summaries_ttl(
    real_redis: redis.Redis, write: str
) -> None:
    """Each write of the conversation gives its summaries key the stored TTL, as it does its
    list: summaries about to expire (no manager has read them for a while) live on with it."""
    history, manager = pod(real_redis, Counting())
    fill(history, 6)
    history.set_ttl(600)
    assert manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    real_redis.pexpire(history.keys.summaries, 1_000)
    WRITES[write](history)
    assert 1_000 < real_redis.pttl(history.keys.summaries) <= 600_000


@dataclass
class Work:
    """What script calls ran inside Redis, as MONITOR shows it (its ``lua`` lines)."""

    commands: int = 0
    arguments: int = 0
    """Every argument of those commands: keys, fields, values."""


_LUA = re.compile(rb"^\S+ \[\d+ lua\] (.*)$", re.DOTALL)
_ARGUMENT = re.compile(rb'"(?:[^"\\]|\\.)*"')


@contextmanager
def watched(server: RedisServer, client: redis.Redis) -> Iterator[Work]:
    """The work of the script calls made in the block; read once the block is left."""
    work, marker = Work(), b"the watched calls are done"
    with server.client().monitor() as monitor:  # type: ignore[no-untyped-call]
        yield work
        client.echo(marker)
        while marker not in (line := monitor.connection.read_response()):
            if found := _LUA.match(line):
                work.commands += 1
                work.arguments += len(_ARGUMENT.findall(found[1])) - 1


def longest_id(summary: int, message: int) -> str:
    """A distinct id as long as an id may be, in characters of 4 UTF-8 bytes (1,024 bytes)."""
    return chr(0x10000 + summary * limits.MAX_SUMMARY_MESSAGES + message) + "\U0001d11e" * 255


TEXT = "é" * (limits.MAX_SUMMARY_BYTES // 2)
"""A summary as long as one may be."""


def at_the_limits(
    history: RedisHistory, core: SummaryCore, summaries: int, first: int = 0
) -> list[list[str]]:
    """``summaries`` summaries of 16 KiB, each of 1,000 messages of the longest ids (summary
    ``first`` and on's), the newest 64 kept; the ids each covers."""
    runs = [
        [longest_id(s, i) for i in range(limits.MAX_SUMMARY_MESSAGES)]
        for s in range(first, first + summaries)
    ]
    for s, run in enumerate(runs, first):
        claimed = history.execute(core.claim(run, token=f"t{s}", now_ms=0, claim_ms=10**9))
        assert claimed == list(range(len(run)))
        assert history.execute(core.store(TEXT, run, token=f"t{s}", kept=limits.MAX_SUMMARIES))
    return runs


def reply_bytes(reply: Any) -> int:
    """The bytes of a reply's strings and integers (digits), nested arrays included."""
    if isinstance(reply, list):
        return sum(map(reply_bytes, reply))
    return len(reply) if isinstance(reply, bytes) else len(str(reply))


@pytest.mark.real_redis
def test_a_read_at_the_limits_returns_at_most_max_summaries_read_bytes(
    real_redis: redis.Redis, redis_server: RedisServer
) -> None:
    """64 summaries of 16 KiB, each of 1,000 messages of 256-character ids: a read returns at
    most ``MAX_SUMMARIES_READ_BYTES`` (1.07 MiB), ids or not, in at most 134 commands."""
    history = RedisHistory(real_redis, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    runs = at_the_limits(history, core, limits.MAX_SUMMARIES)
    read = core.read()
    history.execute(read)  # the script loaded
    with watched(redis_server, real_redis) as work:
        reply = real_redis.execute_command(*read.command)  # type: ignore[no-untyped-call]
    assert reply_bytes(reply) <= limits.MAX_SUMMARIES_READ_BYTES == 1_119_936
    assert work.commands <= 134
    assert work.arguments <= 400
    stored = read.parse(reply)
    assert [(s.first, s.count, s.digest) for s in stored] == [
        (run[0], len(run), span_digest(run)) for run in runs
    ]
    assert all(s.text == TEXT for s in stored)


@pytest.mark.real_redis
def test_each_summaries_call_at_the_limits_does_bounded_work(
    real_redis: redis.Redis, redis_server: RedisServer
) -> None:
    """At the limits, whatever the hash holds, each call's work inside Redis is a bounded count
    (docs/context.md): a claim dropping 64 stale summaries of 1,000 messages and reading the
    states of 10,000, or claiming 1,000; a store dropping 64 summaries at the cap."""
    history = RedisHistory(real_redis, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    runs = at_the_limits(history, core, limits.MAX_SUMMARIES + 10)  # 10 dropped at the cap
    capped = [i for run in runs[:10] for i in run]
    stale = list(range(11, 11 + limits.MAX_SUMMARIES))
    offered = [*capped[1:], "a new message"]
    assert len(offered) == limits.MAX_SUMMARY_CANDIDATES
    with watched(redis_server, real_redis) as claim:
        took = history.execute(core.claim(offered, token="x", now_ms=1, claim_ms=10, stale=stale))
    assert took == [len(offered) - 1]  # after 9,999 summarized at the cap
    assert history.execute(core.read()) == []
    freed = [i for run in runs[10:] for i in run][: limits.MAX_SUMMARY_CANDIDATES]
    with watched(redis_server, real_redis) as most:
        took = history.execute(core.claim(freed, token="y", now_ms=1, claim_ms=10))
    assert took == list(range(limits.MAX_SUMMARY_MESSAGES))
    at_the_limits(history, core, limits.MAX_SUMMARIES, first=len(runs))
    ids = freed[: limits.MAX_SUMMARY_MESSAGES]
    with watched(redis_server, real_redis) as store:
        assert history.execute(core.store(TEXT, ids, token="y", kept=1))
    assert [s.first for s in history.execute(core.read())] == [ids[0]]
    # 10,000 offered messages, each summarized by a different summary dropped since
    marked = {b"i:" + message_digest(i): 10**6 + n for n, i in enumerate(freed)}
    real_redis.hset(history.keys.summaries, mapping=marked)  # type: ignore[arg-type]
    with watched(redis_server, real_redis) as marks:
        took = history.execute(core.claim(freed, token="w", now_ms=1, claim_ms=10))
    assert took == []
    for claimed in (claim, most, marks):
        assert claimed.commands <= 283
        assert claimed.arguments <= 23_000
    assert store.commands <= 202
    assert store.arguments <= 3_600


@pytest.mark.real_redis
def test_a_live_field_past_the_cap_is_refused_at_once(
    real_redis: redis.Redis, redis_server: RedisServer
) -> None:
    """A summaries hash whose ``live`` field names more than 64 summaries (written by anything
    but the scripts) is refused by every call as corrupt, having written nothing, in a few
    commands whatever its length: no call walks it."""
    history = RedisHistory(real_redis, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    ids = [m.id for m in history.snapshot()]
    history.execute(core.claim(ids, token="a", now_ms=0, claim_ms=5_000))
    real_redis.hset(history.keys.summaries, "live", json.dumps(list(range(1, 16_385))))
    before = real_redis.hgetall(history.keys.summaries)
    calls: list[Callable[[], object]] = [
        lambda: history.execute(core.read()),
        lambda: history.execute(core.claim(ids, token="b", now_ms=9_000, claim_ms=5_000)),
        lambda: history.execute(core.store("A's.", ids, token="a", kept=4)),
    ]
    for call in calls:
        with watched(redis_server, real_redis) as work, pytest.raises(CorruptHistoryError):
            call()
        assert work.commands <= 4
    assert real_redis.hgetall(history.keys.summaries) == before


def test_the_summaries_scripts_limits_are_the_clients() -> None:
    """lua/includes/summaries.lua holds the limits and the digest size the client uses, and the
    longest cover a store writes is ``SUMMARY_COVER_BYTES`` long (what a read's bound counts)."""
    source = (Path(__file__).parent.parent / "lua" / "includes" / "summaries.lua").read_text()
    found = re.search(r"^local ([A-Z_, ]+) = ([\d, ]+)$", source, re.MULTILINE)
    assert found is not None
    names, values = found.groups()
    assert dict(zip(names.split(", "), map(int, values.split(", ")), strict=True)) == {
        "MAX_SUMMARIES": limits.MAX_SUMMARIES,
        "MAX_SUMMARY_BYTES": limits.MAX_SUMMARY_BYTES,
        "MAX_SUMMARY_MESSAGES": limits.MAX_SUMMARY_MESSAGES,
        "MAX_COVER_BYTES": limits.SUMMARY_COVER_BYTES,
        "DIGEST": DIGEST_BYTES,
    }
    core = SummaryCore(RedisHistory(redis.Redis(), "c").keys, "c", "default")
    ids = [longest_id(0, i) for i in range(limits.MAX_SUMMARY_MESSAGES)]
    call = core.store(TEXT, ids, token="t" * 32, kept=1)
    assert len(call.command[-2]) == limits.SUMMARY_COVER_BYTES  # the cover, before the digests
    with pytest.raises(ValueError, match="claim token"):
        core.store(TEXT, ids, token="t" * 33, kept=1)
    with pytest.raises(LimitExceededError, match="id's length"):
        core.store(TEXT, ["x" * 257], token="t", kept=1)
