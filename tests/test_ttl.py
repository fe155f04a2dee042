"""The optional sliding TTL: every write refreshes every key of the conversation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
import redis

from redis_history import Message, RedisHistory

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
