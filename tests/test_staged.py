"""Staged appends: a large batch's envelopes go by a plain ``RPUSHX`` in one ``MULTI``/``EXEC``
with the checking script (``lua/append-5.lua``), never through Lua; every way that transaction
can fail to write is sent as the script alone, and none of them leaves anything behind.

The contract suite runs whole with every append staged (``backends.py``); these tests inject
what only a staged append meets, on a real ``redis-server``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
from backends import SyncOverAsync
from faults import FaultProxy
from redis.backoff import NoBackoff
from redis.retry import Retry
from samples import STAGED_TEXT

from redis_history import (
    AsyncRedisHistory,
    CorruptHistoryError,
    Message,
    RedisHistory,
    RoleOrderError,
    StoreUnavailableError,
    ToolCall,
)
from redis_history.wire.scripts import script, script_names

pytestmark = pytest.mark.real_redis

LARGE = STAGED_TEXT
"""A text whose envelope is staged at the default threshold."""


def _turn(n: int) -> list[Message]:
    return [
        Message.user(f"question {n}", id=f"u{n}"),
        Message.assistant("", tool_calls=[ToolCall(id=f"c{n}", name="search")], id=f"a{n}"),
        Message.tool(LARGE, tool_call_id=f"c{n}", id=f"t{n}"),
        Message.assistant(f"answer {n}", id=f"b{n}"),
    ]


TURNS = [_turn(n) for n in range(4)]


def turn(n: int) -> list[Message]:
    """A turn whose tool result is large enough to be staged (the same messages each time)."""
    return TURNS[n]


def calls(client: redis.Redis) -> dict[str, int]:
    """How many times each command ran (``INFO commandstats``), failed calls included."""
    return {
        name.removeprefix("cmdstat_"): int(stats["calls"]) + int(stats.get("failed_calls", 0))
        for name, stats in client.info("commandstats").items()
    }


def state(client: redis.Redis, history: RedisHistory) -> tuple[Any, ...]:
    """Everything stored for a conversation, and whether a stage key is left."""
    keys = history.keys
    return (
        client.lrange(keys.msgs, 0, -1) if client.type(keys.msgs) == b"list" else None,
        client.hgetall(keys.meta),
        client.exists(keys.stage),
    )


def test_a_large_batch_is_staged_out_of_lua(real_redis: redis.Redis) -> None:
    """A batch over STAGE_BYTES is pushed by RPUSHX in a transaction, the script called
    without the envelopes, and nothing is left in the stage key."""
    RedisHistory(real_redis, "warm").append_many(turn(0))  # the server knows the script
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("hi", id="u0"))
    history.append(Message.assistant("hello", id="a0"))
    real_redis.config_resetstat()
    real_redis.config_set("slowlog-log-slower-than", 0)
    real_redis.slowlog_reset()
    history.append_many(turn(1))
    ran = calls(real_redis)
    assert ran["exec"] == ran["rpushx"] == 1
    assert "rpush" not in ran  # the envelopes were not pushed from Lua
    (script_call,) = [e for e in real_redis.slowlog_get(128) if e["command"].startswith(b"EVALSHA")]
    assert b"xxxx" not in script_call["command"]
    assert [m.id for m in history.snapshot()] == ["u0", "a0", "u1", "a1", "t1", "b1"]
    assert history.token_estimate() == sum(e.tokens for e in history.entries())
    assert not real_redis.exists(history.keys.stage)
    real_redis.config_set("slowlog-log-slower-than", 10000)


def test_a_refused_staged_batch_writes_nothing(real_redis: redis.Redis) -> None:
    """A staged batch the script refuses leaves no stage, so the push and the rename that
    follow it in the transaction find nothing: the conversation is as it was."""
    history = RedisHistory(real_redis, "c")
    history.append_many(turn(1))
    before = state(real_redis, history)
    with pytest.raises(RoleOrderError):
        history.append_many([Message.assistant(LARGE)])
    assert state(real_redis, history) == before


def test_a_staged_batch_on_an_empty_conversation_is_sent_as_the_script(
    real_redis: redis.Redis,
) -> None:
    """An empty list cannot be renamed: the script replies -1 having written nothing, and the
    same batch goes as one script with its envelopes."""
    history = RedisHistory(real_redis, "c")
    real_redis.config_resetstat()
    history.append_many(turn(1))
    ran = calls(real_redis)
    assert ran["exec"] == 1
    assert ran["rpush"] == 1
    assert [m.id for m in history.snapshot()] == ["u1", "a1", "t1", "b1"]
    assert not real_redis.exists(history.keys.stage)


def test_a_staged_batch_after_a_script_flush_is_applied_once(real_redis: redis.Redis) -> None:
    """A server that lost its scripts (restart, failover, SCRIPT FLUSH) refuses the staged
    script with NOSCRIPT inside EXEC; the transaction writes nothing and the batch is sent
    as the script's source."""
    history = RedisHistory(real_redis, "c")
    history.append_many(turn(1))
    real_redis.script_flush()
    real_redis.config_resetstat()
    history.append_many(turn(2))
    ran = calls(real_redis)
    assert ran["exec"] == 1
    assert ran["eval"] == 1
    assert [m.id for m in history.snapshot()] == [m.id for m in turn(1) + turn(2)]
    assert not real_redis.exists(history.keys.stage)


def test_an_acl_without_rename_still_appends(real_redis: redis.Redis, redis_url: str) -> None:
    """A user allowed the scripts' commands but not RENAME gets EXECABORT for the staged
    transaction (nothing ran) and the batch is sent as the script."""
    real_redis.acl_setuser(
        "pod",
        enabled=True,
        passwords=["+pw"],
        keys=["rh:t:*"],
        commands=[
            "-@all",
            "+@connection",
            "+@read",
            "+@write",
            "+@transaction",
            "+evalsha",
            "+eval",
            "-rename",
        ],
    )
    try:
        confined = redis.Redis.from_url(redis_url, username="pod", password="pw")
        history = RedisHistory(confined, "c", namespace="t")
        history.append_many(turn(1))
        history.append_many(turn(2))
        assert [m.id for m in history.snapshot()] == [m.id for m in turn(1) + turn(2)]
        assert not real_redis.exists(history.keys.stage)
        confined.close()
    finally:
        real_redis.acl_deluser("pod")


def test_a_staged_batch_on_a_list_of_the_wrong_type_changes_nothing(
    real_redis: redis.Redis,
) -> None:
    """The script's LLEN meets WRONGTYPE before it renames anything: a CorruptHistoryError,
    and the key, the meta hash and the stage are as they were."""
    history = RedisHistory(real_redis, "c")
    history.append_many(turn(1))
    real_redis.delete(history.keys.msgs)
    real_redis.set(history.keys.msgs, "not a list")
    meta = real_redis.hgetall(history.keys.meta)
    with pytest.raises(CorruptHistoryError, match="WRONGTYPE"):
        history.append_many(turn(2))
    assert real_redis.get(history.keys.msgs) == b"not a list"
    assert real_redis.hgetall(history.keys.meta) == meta
    assert not real_redis.exists(history.keys.stage)


def test_a_staged_batch_keeps_the_conversation_ttl(real_redis: redis.Redis) -> None:
    """The TTL the script sets on the renamed list comes back with it: every key of the
    conversation still expires."""
    history = RedisHistory(real_redis, "c", ttl=600)
    history.append_many(turn(1))
    real_redis.persist(history.keys.msgs)
    history.append_many(turn(2))
    for key in (history.keys.msgs, history.keys.meta):  # no archive without a compaction
        assert 0 < real_redis.pttl(key) <= 600_000
    assert not real_redis.exists(history.keys.stage)


def test_staged_batches_on_the_embedded_redis_6_2(embedded_server: Any) -> None:
    """The Redis 6.2 the demo starts runs the staged transaction too: batches land once, a
    refused one writes nothing, and one sent after SCRIPT FLUSH is applied once."""
    client = embedded_server.client()
    client.flushall()
    history = RedisHistory(client, "c")
    history.append_many(turn(1))
    client.config_resetstat()
    history.append_many(turn(2))
    assert calls(client)["exec"] == 1
    before = state(client, history)
    with pytest.raises(RoleOrderError):
        history.append_many([Message.assistant(LARGE)])
    assert state(client, history) == before
    client.script_flush()
    history.append_many(turn(3))
    assert [m.id for m in history.snapshot()] == [m.id for m in turn(1) + turn(2) + turn(3)]
    assert not client.exists(history.keys.stage)
    client.close()


@pytest.fixture(params=["sync", "async"])
def through_proxy(
    request: pytest.FixtureRequest, fault_proxy: FaultProxy, real_redis: redis.Redis
) -> Iterator[Callable[[str, bool], Any]]:
    """Histories through the fault proxy, with redis-py's default retries or none."""
    for name in script_names():
        real_redis.script_load(script(name).source)
    runner = asyncio.Runner()
    closers: list[Callable[[], Any]] = []

    def make(conversation: str, retries: bool) -> Any:
        if request.param == "sync":
            client = (
                redis.Redis(host=fault_proxy.host, port=fault_proxy.port)  # redis-py's retries
                if retries
                else redis.Redis(
                    host=fault_proxy.host, port=fault_proxy.port, retry=Retry(NoBackoff(), 0)
                )
            )
            closers.append(client.close)
            return RedisHistory(client, conversation)
        aretry = redis.asyncio.retry.Retry(NoBackoff(), 3 if retries else 0)
        aclient = redis.asyncio.Redis(host=fault_proxy.host, port=fault_proxy.port, retry=aretry)
        closers.append(lambda: runner.run(aclient.aclose()))
        return SyncOverAsync(AsyncRedisHistory(aclient, conversation), runner)

    yield make
    for close in closers:
        close()
    runner.close()


def test_a_staged_batch_whose_reply_is_lost_is_applied_once(
    through_proxy: Callable[[str, bool], Any], fault_proxy: FaultProxy, real_redis: redis.Redis
) -> None:
    """The server ran the whole transaction and its replies were lost; redis-py re-sends it,
    the script recognises the batch, and the conversation holds it once."""
    reference, faulted = RedisHistory(real_redis, "reference"), through_proxy("faulted", True)
    for history in (reference, faulted):
        history.append_many(turn(1))
    reference.append_many(turn(2))
    real_redis.config_resetstat()
    fault_proxy.drop_reply(b"EVALSHA")
    faulted.append_many(turn(2))
    assert fault_proxy.dropped == 1
    assert calls(real_redis)["exec"] == 2, "the first transaction did not run"
    direct = RedisHistory(real_redis, "faulted")
    assert direct.entries() == reference.entries()
    assert direct.token_estimate() == reference.token_estimate()
    assert not real_redis.exists(direct.keys.stage)


def test_a_caller_repeating_a_staged_batch_after_a_lost_reply_applies_it_once(
    through_proxy: Callable[[str, bool], Any], fault_proxy: FaultProxy, real_redis: redis.Redis
) -> None:
    """Without redis-py retries the caller sees StoreUnavailableError; repeating the batch
    finds it applied and writes nothing more."""
    faulted = through_proxy("faulted", False)
    faulted.append_many(turn(1))
    fault_proxy.drop_reply(b"EVALSHA")
    with pytest.raises(StoreUnavailableError):
        faulted.append_many(turn(2))
    assert fault_proxy.dropped == 1
    faulted.append_many(turn(2))
    direct = RedisHistory(real_redis, "faulted")
    assert [m.id for m in direct.snapshot()] == [m.id for m in turn(1) + turn(2)]
    assert direct.token_estimate() == sum(e.tokens for e in direct.entries())


def test_keyspace_notifications_show_a_staged_batch_as_renames_and_a_push(
    real_redis: redis.Redis,
) -> None:
    """What a subscriber to the conversation's keyspace events sees of a staged batch: msgs
    renamed to the stage and back (rename_from, rename_to), the push on the stage."""
    history = RedisHistory(real_redis, "c")
    history.append_many(turn(1))
    real_redis.config_set("notify-keyspace-events", "Kgl")
    pubsub = real_redis.pubsub()  # type: ignore[no-untyped-call]
    try:
        pubsub.psubscribe(f"__keyspace@0__:{history.keys.msgs[:-5]}*")
        assert pubsub.get_message(timeout=1)["type"] == "psubscribe"
        history.append_many(turn(2))
        events = []
        while (event := pubsub.get_message(timeout=1)) is not None:
            channel = event["channel"].decode().rsplit(":", 1)[1]
            events.append((channel, event["data"].decode()))
    finally:
        pubsub.close()
        real_redis.config_set("notify-keyspace-events", "")
    assert events == [
        ("msgs", "rename_from"),
        ("stage", "rename_to"),
        ("stage", "rpush"),
        ("stage", "rename_from"),
        ("msgs", "rename_to"),
    ]


@pytest.mark.parametrize("refused", [False, True], ids=["accepted", "refused"])
def test_a_stray_stage_key_never_reaches_the_conversation(
    real_redis: redis.Redis, refused: bool
) -> None:
    """A list left at the conversation's stage key (a crashed client's, an operator's) is
    removed by a staged append before anything else: a refused batch writes nothing to the
    conversation, an accepted one lands alone, and neither picks up the stray entries."""
    history = RedisHistory(real_redis, "c")
    history.append_many(turn(1))
    before = history.snapshot()
    stray = Message.system("injected")
    real_redis.rpush(history.keys.stage, f'{{"t":1,"m":{stray.model_dump_json()}}}')
    if refused:
        with pytest.raises(RoleOrderError):
            history.append_many([Message.assistant(LARGE)])
        assert history.snapshot() == before
    else:
        history.append_many(turn(2))
        assert history.snapshot() == [*before, *turn(2)]
    assert not real_redis.exists(history.keys.stage)
    assert history.token_estimate() == sum(e.tokens for e in history.entries())
