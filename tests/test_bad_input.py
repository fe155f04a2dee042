"""Bad input and bad stored data: a typed error, and Redis byte-for-byte unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis

from redis_history import (
    CorruptHistoryError,
    LockLostError,
    Message,
    MessageTooLargeError,
    RedisHistory,
    RoleOrderError,
    StaleSnapshotError,
    StoreUnavailableError,
    ToolCall,
    ToolPairingError,
)
from redis_history.server import free_port


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
