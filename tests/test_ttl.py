"""The optional sliding TTL: stored with the conversation, every writer refreshes every key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
import redis
from samples import turns

from redis_history import CompactionPolicy, Message, RedisHistory, StaleSnapshotError
from redis_history.compaction.run import run_compaction
from redis_history.testing import FakeSummarizer

pytestmark = pytest.mark.real_redis


def test_every_write_refreshes_the_expiry(real_redis: redis.Redis) -> None:
    """After each write, msgs, meta and archive all carry the history's TTL."""
    history = RedisHistory(real_redis, "c", ttl=timedelta(minutes=5))
    writes: list[Callable[[], object]] = [
        lambda: history.append_many([Message.user("u"), Message.assistant("a")]),
        lambda: history.splice_prefix(1, Message.user("s")),
        lambda: history.record_input_tokens(10),
        lambda: history.append(Message.user("again")),
        lambda: history.truncate(2),
        lambda: history.replace([Message.user("fresh")]),
    ]
    for write in writes:
        for key in history.keys.data:
            real_redis.persist(key)
        write()
        for key in history.keys.data:
            if real_redis.exists(key):
                assert 0 < real_redis.pttl(key) <= 300_000, key


def test_without_ttl_keys_do_not_expire(real_redis: redis.Redis) -> None:
    """The default history never sets an expiry."""
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("u"))
    assert all(real_redis.pttl(k) == -1 for k in (history.keys.msgs, history.keys.meta))


def test_ttl_must_be_positive(real_redis: redis.Redis) -> None:
    """A zero or negative TTL is a ValueError."""
    with pytest.raises(ValueError, match="ttl"):
        RedisHistory(real_redis, "c", ttl=0)


def assert_all_expire(client: redis.Redis, history: RedisHistory, ttl_ms: int) -> None:
    """Every existing key of the conversation (the lock aside) carries a TTL of at most ttl_ms."""
    for key in history.keys.data:
        if client.exists(key):
            assert 0 < client.pttl(key) <= ttl_ms, key


def test_the_ttl_belongs_to_the_conversation(real_redis: redis.Redis) -> None:
    """A writer configured without a TTL (a worker, another pod) applies the stored one to
    every key it writes, the archive it creates included; replace keeps it on the list."""
    pod = RedisHistory(real_redis, "c", ttl=300)
    pod.append_many(turns(3))
    assert pod.ttl() == 300
    other = RedisHistory(real_redis, "c")
    assert other.ttl() == 300
    writes: list[Callable[[], object]] = [
        lambda: other.splice_prefix(5, Message.system("s")),
        lambda: other.append(Message.user("u")),
        lambda: other.record_input_tokens(10),
        lambda: other.compaction_event("compacted", 1),
        other.advance_turn,  # a state that changes: an unchanged one writes nothing
        lambda: other.rollback([other.snapshot()[-1].id]),
        lambda: other.truncate(1),
        lambda: other.replace(turns(1)),
    ]
    for write in writes:
        for key in other.keys.data:
            real_redis.persist(key)
        write()
        assert_all_expire(real_redis, other, 300_000)
    assert real_redis.exists(other.keys.archive)


def test_a_compaction_by_a_worker_without_ttl_keeps_the_ttl(real_redis: redis.Redis) -> None:
    """A worker's history is built without the pod's options; its archive still expires."""
    pod = RedisHistory(real_redis, "c", ttl=timedelta(minutes=2), token_counter="heuristic")
    pod.append_many(turns(12))
    worker = RedisHistory(real_redis, "c", token_counter="heuristic")
    policy = CompactionPolicy(soft_tokens=1, hard_tokens=2, min_messages=2)
    assert run_compaction(worker, FakeSummarizer(), policy).status == "compacted"
    assert real_redis.exists(worker.keys.archive)
    assert_all_expire(real_redis, worker, 120_000)


def test_set_ttl_changes_or_removes_it_everywhere(real_redis: redis.Redis) -> None:
    """set_ttl stores a new TTL and applies it to every key; set_ttl(None) makes them persist."""
    history = RedisHistory(real_redis, "c")
    assert history.set_ttl(60) is False  # no conversation yet: nothing to set it on
    assert not real_redis.exists(history.keys.meta)
    history.append_many(turns(2))
    history.splice_prefix(5, Message.system("s"))
    assert history.set_ttl(60) is True
    assert history.ttl() == 60
    assert_all_expire(real_redis, history, 60_000)
    assert history.set_ttl(None) is True
    assert history.ttl() is None
    assert all(real_redis.pttl(k) == -1 for k in history.keys.data)
    history.append(Message.user("u"))
    assert all(real_redis.pttl(k) == -1 for k in history.keys.data)


def test_nothing_brings_a_deleted_conversation_back(real_redis: redis.Redis) -> None:
    """After delete(), late writes of workers and pods (state events, tokens, claims, splices,
    truncates, rollbacks) create no key: none could outlive the conversation."""
    history = RedisHistory(real_redis, "c", token_counter="heuristic")
    history.append_many(turns(3))
    ids = [m.id for m in history.snapshot()]
    history.delete()
    late: list[Callable[[], object]] = [
        history.advance_turn,
        lambda: history.compaction_event("compacted", 2, 100),
        lambda: history.compaction_event("exhausted"),
        lambda: history.record_input_tokens(10),
        lambda: history.execute(history.core.claim_compaction("job", 0, 1000)),
        lambda: history.release_compaction_claim("job"),
        lambda: history.splice_prefix(3, Message.system("s")),
        lambda: history.truncate(1),
    ]
    for write in late:
        write()
    with pytest.raises(StaleSnapshotError):
        history.rollback(ids[-2:])
    with pytest.raises(StaleSnapshotError):
        history.splice_prefix(2, Message.system("s"), expected_ids=ids[:2])
    assert real_redis.keys("*") == []


def test_advancing_a_new_conversation_creates_nothing(real_redis: redis.Redis) -> None:
    """advance_turn at the start of a first turn (Ready stays Ready) writes no key."""
    history = RedisHistory(real_redis, "new")
    assert history.advance_turn().kind == "ready"
    assert real_redis.keys("*") == []
