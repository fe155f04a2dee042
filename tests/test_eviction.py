"""A conversation that lost one of its keys (evicted under a maxmemory policy other than
``noeviction``, or deleted) is noticed by every script that reads it: its writes and its
O(1) reads raise CorruptHistoryError, writing nothing, instead of taking a lost turn state
for a fresh one; replace() or delete() repairs it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from samples import STAGED_TEXT
from test_bad_input import dump

from redis_history import CorruptHistoryError, Message, RedisHistory, ToolCall
from redis_history.demo.server import RedisServer

pytestmark = pytest.mark.real_redis


def seeded(client: redis.Redis) -> tuple[RedisHistory, list[Message]]:
    history = RedisHistory(client, "c")
    messages = [
        Message.system("s"),
        Message.user("q"),
        Message.assistant("", tool_calls=[ToolCall(id="c1", name="f")]),
        Message.tool("r", tool_call_id="c1"),
        Message.assistant("a"),
    ]
    history.append_many(messages)
    return history, messages


def refused(history: RedisHistory, messages: list[Message]) -> dict[str, Callable[[], Any]]:
    """Every write and O(1) read a lost key must refuse."""
    return {
        "a system message mid-conversation": lambda: history.append(Message.system("late")),
        "a retried append": lambda: history.append_many(messages[-2:]),
        "a large (staged) append": lambda: history.append(Message.user(STAGED_TEXT)),
        "the estimate": history.token_estimate,
        "the compaction status": history.compaction_status,
        "a splice": lambda: history.splice_prefix(5, Message.system("summary")),
        "a truncate": lambda: history.truncate(1),
        "a rollback": lambda: history.rollback(messages[-1:]),
        "the input tokens": lambda: history.record_input_tokens(100),
        "a turn": history.advance_turn,
        "a compaction event": lambda: history.compaction_event("exhausted"),
        "a TTL": lambda: history.set_ttl(60),
    }


@pytest.mark.parametrize("lost", ["meta", "msgs"])
def test_a_lost_key_refuses_writes_and_estimates(real_redis: redis.Redis, lost: str) -> None:
    """With its meta hash (or its list) gone, nothing is accepted as if the conversation
    were new, and nothing is written; replace() rebuilds it whole."""
    history, messages = seeded(real_redis)
    real_redis.delete(getattr(history.keys, lost))
    before = dump(real_redis)
    for name, call in refused(history, messages).items():
        with pytest.raises(CorruptHistoryError, match="maxmemory-policy noeviction"):
            call()
        assert dump(real_redis) == before, name
    history.replace(messages)
    assert history.snapshot() == messages
    assert history.token_estimate() == sum(e.tokens for e in history.entries())
    history.append(Message.user("next"))


@pytest.fixture
def evicting() -> Iterator[redis.Redis]:
    """A server that evicts keys with a TTL (volatile-lru) once over 4 MB."""
    with RedisServer() as server:
        client = server.client()
        client.config_set("maxmemory-policy", "volatile-lru")
        yield client
        client.close()


def test_a_meta_hash_evicted_for_real_is_noticed(evicting: redis.Redis) -> None:
    """The meta hash, the one key with a TTL, is evicted when the server fills up; the next
    append and estimate refuse instead of starting the turn state over."""
    history, _ = seeded(evicting)
    evicting.persist(history.keys.msgs)
    evicting.pexpire(history.keys.meta, 86_400_000)
    used = int(evicting.info("memory")["used_memory"])
    evicting.config_set("maxmemory", used + (4 << 20))
    for i in range(64):  # keys without a TTL until the server must evict the meta hash
        try:
            evicting.set(f"filler:{i}", b"x" * (256 << 10))
        except redis.exceptions.OutOfMemoryError:
            break
    evicting.delete(*evicting.keys("filler:*"))
    assert not evicting.exists(history.keys.meta)
    assert evicting.llen(history.keys.msgs) == 5
    with pytest.raises(CorruptHistoryError, match="meta hash is gone"):
        history.append(Message.system("late"))
    with pytest.raises(CorruptHistoryError):
        history.token_estimate()
    assert evicting.llen(history.keys.msgs) == 5


def test_an_append_onto_a_lost_list_writes_nothing_at_all(real_redis: redis.Redis) -> None:
    """The refusal of an append whose list was lost comes before any write: no push that
    is then undone (a replica or a subscriber would see it), only an RPUSHX that finds no
    list."""
    history, _ = seeded(real_redis)
    real_redis.delete(history.keys.msgs)
    real_redis.config_resetstat()
    with pytest.raises(CorruptHistoryError, match="messages are gone"):
        history.append(Message.user("next"))
    ran = set(real_redis.info("commandstats"))
    assert not ran & {"cmdstat_rpush", "cmdstat_del", "cmdstat_unlink", "cmdstat_hset"}
    assert not real_redis.exists(history.keys.msgs)
