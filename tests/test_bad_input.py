"""Bad input and bad stored data: a typed error, and Redis byte-for-byte unchanged."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from samples import incompressible

from redis_history import (
    AsyncRedisHistory,
    CorruptHistoryError,
    InvalidMessageError,
    LockLostError,
    Message,
    MessageTooLargeError,
    RedisHistory,
    RoleOrderError,
    StaleSnapshotError,
    StoreUnavailableError,
    ToolCall,
    ToolPairingError,
    UnsupportedClientError,
)
from redis_history.admin.target import Target
from redis_history.cli import main
from redis_history.compaction.jobs import compaction_queue
from redis_history.demo.server import LocalCluster, RedisServer, free_port
from redis_history.memory import AsyncRedisLongTermMemory, RedisLongTermMemory


def dump(client: redis.Redis) -> dict[Any, Any]:
    """Every key's serialized value and TTL: equal dumps mean nothing was written."""
    return {key: (client.dump(key), client.pttl(key)) for key in sorted(client.keys("*"))}


def seeded(client: redis.Redis) -> RedisHistory:
    history = RedisHistory(client, "conv", max_message_bytes=4096)
    history.append_many(
        [
            Message.system("s"),
            Message.user("u"),
            Message.assistant("", tool_calls=[ToolCall(id="c1", name="f")]),
        ]
    )
    return history


BAD_WRITES: dict[str, tuple[type[Exception], Callable[[RedisHistory], Any]]] = {
    "system-late": (RoleOrderError, lambda h: h.append(Message.system("late"))),
    "orphan-tool": (ToolPairingError, lambda h: h.append(Message.tool("r", tool_call_id="zz"))),
    "open-calls": (ToolPairingError, lambda h: h.append(Message.user("still open"))),
    "bad-batch": (
        RoleOrderError,
        lambda h: h.append_many(
            [Message.tool("r", tool_call_id="c1"), Message.assistant("a"), Message.assistant("b")]
        ),
    ),
    "oversized": (
        MessageTooLargeError,
        lambda h: h.append(Message.tool("x" * 9000, tool_call_id="c1")),
    ),
    "replace-bad": (RoleOrderError, lambda h: h.replace([Message.user("u"), Message.user("u")])),
    "stale-splice": (
        StaleSnapshotError,
        lambda h: h.splice_prefix(2, Message.user("s"), expected_ids=["x", "y"]),
    ),
    "lock-lost": (
        LockLostError,
        lambda h: h.splice_prefix(2, Message.user("s"), lock_token="not-the-holder"),
    ),
    "empty-lock-token": (
        ValueError,
        lambda h: h.splice_prefix(2, Message.user("s"), lock_token=""),
    ),
    "ids-not-drop-count": (
        ValueError,
        lambda h: h.splice_prefix(2, Message.user("s"), expected_ids=["x"]),
    ),
}


@pytest.mark.parametrize("case", list(BAD_WRITES))
def test_refused_writes_change_nothing(client: redis.Redis, case: str) -> None:
    """Each kind of bad write raises its typed error and leaves every key as it was."""
    history = seeded(client)
    error, write = BAD_WRITES[case]
    before = dump(client)
    with pytest.raises(error):
        write(history)
    assert dump(client) == before


def test_corrupt_envelope_names_the_index(client: redis.Redis) -> None:
    """A list item that is not an envelope raises CorruptHistoryError with its index."""
    history = seeded(client)
    client.rpush(history.keys.msgs, b'{"t":1,"x":1,"s":0,"m":{"role":"wizard"}}', b"not json")
    with pytest.raises(CorruptHistoryError) as info:
        history.snapshot()
    assert info.value.index == 3
    assert info.value.conversation_id == "conv"
    client.lset(history.keys.msgs, 3, "{}")
    with pytest.raises(CorruptHistoryError) as info:
        history.tail(2)
    assert info.value.index == 0


def test_corrupt_meta_refuses_writes(client: redis.Redis) -> None:
    """A meta hash holding garbage makes writes and estimates raise, writing nothing."""
    history = seeded(client)
    client.hset(history.keys.meta, "total", "many")
    before = dump(client)
    with pytest.raises(CorruptHistoryError):
        history.append(Message.tool("r", tool_call_id="c1"))
    with pytest.raises(CorruptHistoryError):
        history.truncate(1)
    with pytest.raises(CorruptHistoryError):
        history.replace([Message.user("x")])
    with pytest.raises(CorruptHistoryError):
        history.splice_prefix(1, Message.user("s"))
    with pytest.raises(CorruptHistoryError):
        history.record_input_tokens(5)
    with pytest.raises(CorruptHistoryError):
        history.token_estimate()
    assert dump(client) == before


def test_corrupt_turn_state_or_mark_refuses(client: redis.Redis) -> None:
    """Open tool calls that are not a JSON array refuse appends; a baseline mark that is
    not a number makes the estimate raise. Nothing is written."""
    history = seeded(client)
    client.hset(history.keys.meta, "open", "[c1")
    before = dump(client)
    with pytest.raises(CorruptHistoryError, match="open"):
        history.append(Message.tool("r", tool_call_id="c1"))
    assert dump(client) == before

    history = seeded(fakeredis.FakeRedis())
    history.record_input_tokens(100)
    history.client.hset(history.keys.meta, "mark", "later")
    with pytest.raises(CorruptHistoryError):
        history.token_estimate()


def test_a_corrupt_meta_role_is_corrupt_data_not_bad_input(client: redis.Redis) -> None:
    """Junk in the stored role is reported as CorruptHistoryError (not RoleOrderError) by
    every write that reads it, and nothing is written."""
    history = seeded(client)
    client.hset(history.keys.meta, "role", "wizard")
    before = dump(client)
    for write in (
        lambda: history.append(Message.user("u")),
        lambda: history.truncate(1),
        lambda: history.rollback([history.snapshot()[-1].id]),
        lambda: history.replace([Message.user("x")]),
        lambda: history.record_input_tokens(3),
        history.advance_turn,
    ):
        with pytest.raises(CorruptHistoryError, match="role"):
            write()
    assert dump(client) == before


def test_a_stored_tool_message_without_its_call_id_is_corrupt(client: redis.Redis) -> None:
    """An envelope whose tool message lacks tool_call_id makes truncate and rollback raise
    CorruptHistoryError (not a Lua error), writing nothing."""
    history = seeded(client)
    history.append_many([Message.tool("r", tool_call_id="c1"), Message.assistant("done")])
    messages = history.snapshot()
    envelope = bytes(client.lindex(history.keys.msgs, 3) or b"").decode()  # type: ignore[arg-type]
    assert '"tool_call_id":"c1"' in envelope
    client.lset(history.keys.msgs, 3, envelope.replace('"c1"', "null"))
    before = dump(client)
    with pytest.raises(CorruptHistoryError) as info:
        history.truncate(4)
    assert info.value.index == 3
    with pytest.raises(CorruptHistoryError):
        history.rollback([messages[-1].id])
    assert dump(client) == before


def test_corrupt_envelope_refuses_truncate_and_splice(client: redis.Redis) -> None:
    """Scripts that read stored envelopes refuse corrupt ones instead of miscounting."""
    history = seeded(client)
    ids = [m.id for m in history.snapshot()][:2]
    client.lset(history.keys.msgs, 1, "garbage")
    before = dump(client)
    with pytest.raises(CorruptHistoryError):
        history.truncate(1)
    with pytest.raises(CorruptHistoryError):
        history.splice_prefix(2, Message.user("s"))
    with pytest.raises(CorruptHistoryError):
        history.splice_prefix(2, Message.user("s"), expected_ids=ids)
    assert dump(client) == before


def test_wrong_key_type_is_corrupt(client: redis.Redis) -> None:
    """A conversation key of the wrong type raises CorruptHistoryError, not a redis error."""
    history = RedisHistory(client, "conv")
    client.set(history.keys.msgs, "a string")
    with pytest.raises(CorruptHistoryError):
        history.snapshot()
    with pytest.raises(CorruptHistoryError):
        history.append(Message.user("u"))
    assert client.get(history.keys.msgs) == b"a string"
    assert not client.exists(history.keys.meta)


def test_unreachable_redis_is_store_unavailable() -> None:
    """Nothing listening: StoreUnavailableError wrapping the redis-py error."""
    history = RedisHistory.from_url(f"redis://127.0.0.1:{free_port()}/0", "conv")
    with pytest.raises(StoreUnavailableError) as info:
        history.append(Message.user("u"))
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    assert isinstance(info.value, ConnectionError)
    with pytest.raises(StoreUnavailableError):
        history.snapshot()


def _answer(content: str = "r", **fields: Any) -> Message:
    return Message.tool(content, tool_call_id="c1", **fields)


def _call(arguments: dict[str, Any]) -> list[Message]:
    return [
        Message.user("u"),
        Message.assistant("", tool_calls=[ToolCall(id="c2", name="f", arguments=arguments)]),
    ]


SURROGATES: dict[str, tuple[Callable[[RedisHistory], Any], str, int]] = {
    "content": (
        lambda h: h.append(_answer("ok \ud800")),
        r"content holds a lone surrogate U\+D800",
        0,
    ),
    "name": (lambda h: h.append(_answer(name="f\udfff")), r"name holds a lone surrogate", 0),
    "tool-call-id": (
        lambda h: h.append(Message.tool("r", tool_call_id="c1\ud800")),
        r"tool_call_id holds a lone surrogate",
        0,
    ),
    "metadata-value": (
        lambda h: h.append(_answer(metadata={"a": ["x", "\ud83d"]})),
        r"metadata\['a'\]\[1\] holds a lone surrogate",
        0,
    ),
    "metadata-key": (
        lambda h: h.append(_answer(metadata={"k\udc80": 1})),
        r"metadata key 'k\\udc80' holds a lone surrogate",
        0,
    ),
    "nested-key": (
        lambda h: h.append(_answer(metadata={"a": {"\udc80": 1}})),
        r"metadata\['a'\] key '\\udc80'",
        0,
    ),
    "arguments-value": (
        lambda h: h.replace(_call({"q": "\ud800"})),
        r"tool_calls\[0\]\.arguments\['q'\] holds a lone surrogate",
        1,
    ),
    "arguments-key": (
        lambda h: h.replace(_call({"\ud800": "q"})),
        r"tool_calls\[0\]\.arguments key",
        1,
    ),
    "second-in-batch": (
        lambda h: h.append_many([_answer(), Message.user("fine"), Message.assistant("\ud800")]),
        r"at index 2 .*content holds a lone surrogate",
        2,
    ),
    "splice-summary": (
        lambda h: h.splice_prefix(2, Message.system("summary \ud800")),
        r"content holds a lone surrogate",
        0,
    ),
}


@pytest.mark.parametrize("case", list(SURROGATES))
def test_lone_surrogates_are_refused_when_written(client: redis.Redis, case: str) -> None:
    """A lone surrogate anywhere in a message raises InvalidMessageError naming the field and
    the index in the batch, and leaves every key as it was."""
    history = seeded(client)
    write, match, index = SURROGATES[case]
    before = dump(client)
    with pytest.raises(InvalidMessageError, match=match) as info:
        write(history)
    assert info.value.index == index
    assert info.value.conversation_id == "conv"
    assert dump(client) == before


def test_values_that_skipped_validation_are_refused_if_unwritable(client: redis.Redis) -> None:
    """An object the serializer cannot write, put into metadata after construction, raises
    InvalidMessageError naming it, not a raw pydantic error; nothing is written."""
    history = seeded(client)
    message = _answer()
    message.metadata["handle"] = object()
    before = dump(client)
    with pytest.raises(InvalidMessageError, match=r"metadata\['handle'\] is object"):
        history.append(message)
    assert dump(client) == before


def test_nan_that_skipped_validation_reads_back_as_nan(client: redis.Redis) -> None:
    """Construction refuses NaN; one put in afterwards is stored as NaN and reads back as
    NaN and infinity, never silently as null."""
    history = seeded(client)
    message = _answer()
    message.metadata.update(score=math.nan, bound=-math.inf)
    history.append(message)
    stored = history.snapshot()[-1].metadata
    assert math.isnan(stored["score"])
    assert stored["bound"] == -math.inf
    history.append(Message.assistant("next"))
    assert history.truncate(4) == 1, "the truncate script decodes that envelope with cjson"
    assert math.isnan(history.snapshot()[-1].metadata["score"])


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda h: h.splice_prefix(1, Message.system("s"), expected_ids=["\ud800"]),
            id="splice-ids",
        ),
        pytest.param(
            lambda h: h.splice_prefix(1, Message.system("s"), lock_token="\ud800"), id="lock-token"
        ),
        pytest.param(lambda h: h.replace([], expected_ids=["a", "\udfff"]), id="replace-ids"),
        pytest.param(lambda h: h.rollback(["\ud800"]), id="rollback-ids"),
    ],
)
def test_ids_and_tokens_utf8_cannot_encode_are_value_errors(client: redis.Redis, call: Any) -> None:
    """A lone surrogate in an expected id, a rollback id or a lock token is a ValueError raised
    before anything is sent, not a UnicodeEncodeError from the client."""
    history = seeded(client)
    before = dump(client)
    with pytest.raises(ValueError, match="UTF-8"):
        call(history)
    assert dump(client) == before


@pytest.mark.real_redis
def test_a_client_that_decodes_replies_is_refused_where_it_enters(
    redis_server: RedisServer, redis_cluster: LocalCluster
) -> None:
    """A client made with ``decode_responses=True`` (sync or asyncio, standalone or cluster,
    fakeredis, a pool of its own, a URL asking for it) would fail its first read of a long
    message with a raw ``UnicodeDecodeError``: a history, a long-term memory, an operator's
    target and a compaction queue refuse it as they are made, with UnsupportedClientError
    (a ValueError), nothing sent; the command line exits 2. A client of bytes reads the same
    message back."""
    host, port = "127.0.0.1", redis_server.port
    cluster_port = redis_cluster.nodes[0].port
    clients: dict[str, Any] = {
        "redis": redis.Redis(host=host, port=port, decode_responses=True),
        "pool": redis.Redis(connection_pool=redis.ConnectionPool(port=port, decode_responses=True)),
        "url": redis.Redis.from_url(f"{redis_server.url}?decode_responses=True"),
        "asyncio": redis.asyncio.Redis(host=host, port=port, decode_responses=True),
        "cluster": redis_cluster.client(decode_responses=True),
        "asyncio-cluster": AsyncRedisCluster(host=host, port=cluster_port, decode_responses=True),
        "fakeredis": fakeredis.FakeRedis(decode_responses=True),
    }
    makers: dict[str, Callable[[Any], Any]] = {
        "RedisHistory": lambda client: RedisHistory(client, "c"),
        "AsyncRedisHistory": lambda client: AsyncRedisHistory(client, "c"),
        "RedisLongTermMemory": RedisLongTermMemory,
        "AsyncRedisLongTermMemory": AsyncRedisLongTermMemory,
        "Target": Target,
    }
    plain = redis_server.client()
    plain.flushall()
    plain.config_resetstat()
    for name, client in clients.items():
        for maker, make in makers.items():
            with pytest.raises(UnsupportedClientError, match="decode_responses=True") as refused:
                make(client)
            assert isinstance(refused.value, ValueError), (name, maker)
    for name in ("redis", "pool", "url", "fakeredis"):
        with pytest.raises(UnsupportedClientError):
            compaction_queue(clients[name], "q")
    assert plain.info("commandstats").keys() <= {"cmdstat_flushall", "cmdstat_config|resetstat"}
    assert plain.dbsize() == 0
    status = main(["ls", "--redis-url", f"{redis_server.url}?decode_responses=True"])
    assert status == 2
    long = Message.user(incompressible(5_000))  # kept compressed: not UTF-8
    RedisHistory(plain, "c").append(long)
    assert RedisHistory(plain, "c").snapshot() == [long]
    clients["cluster"].close()
