"""``lua/append_small-4.lua``, the append of a short batch, answers and writes exactly
what ``lua/append-5.lua`` does for it, from every kind of stored state: the two scripts are
run side by side on two copies of one conversation and compared, reply and keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from samples import STAGED_TEXT

from redis_history import Message, RedisHistory, ToolCall
from redis_history.errors import HistoryError
from redis_history.parts import FilePart
from redis_history.roles import Roles
from redis_history.store import core
from redis_history.store.codec import encode_message, role_item
from redis_history.wire.call import Call

Setup = Callable[[RedisHistory, redis.Redis], None]


def appended(*messages: Message) -> Setup:
    return lambda history, _client: history.append_many(list(messages))


def calls(*ids: str) -> Message:
    return Message.assistant("", tool_calls=[ToolCall(id=i, name="f", arguments={}) for i in ids])


def meta(**fields: str) -> Setup:
    """The conversation's first turn, then the meta hash's ``fields`` overwritten."""

    def setup(history: RedisHistory, client: redis.Redis) -> None:
        history.append_many(FIRST)
        for name, value in fields.items():
            client.hset(history.keys.meta, name, value)

    return setup


def lost(key: str) -> Setup:
    def setup(history: RedisHistory, client: redis.Redis) -> None:
        history.append_many(FIRST)
        client.delete(getattr(history.keys, key))

    return setup


FIRST = [Message.system("s", id="s0"), Message.user("u", id="u0")]


FIRST_REPLY, SUMMARY = Message.assistant("a", id="a0"), Message.system("summary", id="sum")


def compacted(history: RedisHistory, _client: redis.Redis) -> None:
    """A turn summarized, the originals in the archive (a key whose TTL a write refreshes)."""
    history.append_many([*FIRST, FIRST_REPLY])
    history.splice_prefix(2, SUMMARY, expected_ids=["s0", "u0"])


REPLY = Message.assistant("reply", id="m-assistant")


def rewritten(rewrite: Callable[[RedisHistory], Any]) -> Setup:
    """A turn, then the batch of ``USER`` and ``REPLY`` appended and rewritten by
    ``rewrite``: appended again, that batch is new, refused or a replay."""

    def setup(history: RedisHistory, _client: redis.Redis) -> None:
        history.append_many([*FIRST, FIRST_REPLY])
        history.append_many([USER, REPLY])
        rewrite(history)

    return setup


USER = Message.user("next", id="m-user")
STATES: dict[str, Setup] = {
    "new": lambda _history, _client: None,
    "after system": appended(Message.system("s", id="s0")),
    "after user": appended(*FIRST),
    "after assistant": appended(*FIRST, Message.assistant("a", id="a0")),
    "after answered calls": appended(
        *FIRST, calls("c1"), Message.tool("r", tool_call_id="c1", id="t1")
    ),
    "calls open": appended(*FIRST, calls("c1", "c2")),
    "a call of two open": appended(
        *FIRST, calls("c1", "c2"), Message.tool("r", tool_call_id="c1", id="t1")
    ),
    "compacted": compacted,
    "replay of the user message": appended(Message.system("s", id="s0"), USER),
    "role not a role": meta(role="robot"),
    "total not a number": meta(total="many"),
    "open not JSON": meta(open="[c1"),
    "open holds a number": meta(open="[1]"),
    "open an empty array": meta(open="[]"),
    "open holds an id twice": meta(open='["c1","c1"]'),
    "meta hash lost": lost("meta"),
    "list lost": lost("msgs"),
    "user, assistant rolled back": rewritten(
        lambda h: h.rollback(["m-user", "m-assistant"], op_id="rollback")
    ),
    "user, assistant truncated away": rewritten(lambda h: h.truncate(3, op_id="truncate")),
    "user, assistant cut by a rollback": rewritten(
        lambda h: h.rollback(["m-assistant"], op_id="rollback")
    ),
    "user, assistant compacted": rewritten(lambda h: h.splice_prefix(4, SUMMARY)),
}
CALLING = calls("c3", "c4")
BATCHES = {
    "user": [USER],
    "system": [Message.system("again", id="m-system")],
    "assistant": [REPLY],
    "calls": [CALLING],
    "result for c1": [Message.tool("r1", tool_call_id="c1", id="m-t1")],
    "result for c2": [Message.tool("r2", tool_call_id="c2", id="m-t2")],
    "result for nothing open": [Message.tool("rx", tool_call_id="cx", id="m-tx")],
    "user, assistant": [USER, REPLY],
    "system, user": [Message.system("again", id="m-system"), USER],
    "assistant, user, assistant": [REPLY, USER, Message.assistant("more", id="m-more")],
    "user, user": [USER, Message.user("again", id="m-again")],
    "assistant, assistant": [REPLY, Message.assistant("more", id="m-more")],
    "user, system": [USER, Message.system("late", id="m-late")],
    "both results, a reply": [
        Message.tool("r1", tool_call_id="c1", id="m-t1"),
        Message.tool("r2", tool_call_id="c2", id="m-t2"),
        REPLY,
    ],
    "one result twice": [
        Message.tool("r1", tool_call_id="c1", id="m-t1"),
        Message.tool("r1 again", tool_call_id="c1", id="m-t1b"),
    ],
    "a whole tool turn": [
        USER,
        CALLING,
        Message.tool("r3", tool_call_id="c3", id="m-t3"),
        Message.tool("r4", tool_call_id="c4", id="m-t4"),
        REPLY,
    ],
    "calls left open, then a user": [USER, CALLING, Message.user("early", id="m-early")],
}


def general(history: RedisHistory, messages: list[Message]) -> Call[Any]:
    """``append-5.lua``'s call for ``messages``, as the store sent it before the plain path."""
    store = history.core
    token = core.op_token("append", [m.id for m in messages])
    if len(messages) == 1:
        envelope, tokens = encode_message(messages[0], store._price, store.max_message_bytes)
        return store._append_call(token, tokens, (envelope,), role_item(messages[0]))
    batch = store._batch(messages)
    return store._append_call(token, batch.tokens, batch.envelopes, batch.roles)


def outcome(history: RedisHistory, call: Call[Any]) -> tuple[Any, ...]:
    try:
        return ("reply", history.execute(call))
    except HistoryError as exc:
        return (type(exc).__name__, exc.index, str(exc).replace(history.conversation_id, "<id>"))


def keys(client: redis.Redis, history: RedisHistory) -> dict[str, Any]:
    """What the conversation holds: its list, meta hash and archive, and each key's TTL to
    the nearest minute (a write refreshes the 5 minutes of the setup to the history's 10)."""
    k = history.keys
    return {
        "msgs": client.lrange(k.msgs, 0, -1),
        "meta": client.hgetall(k.meta),
        "archive": client.lrange(k.archive, 0, -1),
        "ttl": [(client.pttl(key) + 30_000) // 60_000 for key in (k.msgs, k.meta, k.archive)],
    }


@pytest.mark.parametrize("ttl", [None, 600])
@pytest.mark.parametrize("checks", ["strict", "lenient", "none"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("state", STATES)
def test_the_plain_script_answers_and_writes_as_the_general_one(
    client: redis.Redis, state: str, batch: str, checks: str, ttl: int | None
) -> None:
    messages = BATCHES[batch]
    roles: Roles = "lenient" if checks == "lenient" else "strict"
    validate = checks != "none"
    plain = RedisHistory(client, "plain", validate=validate, roles=roles, ttl=ttl)
    other = RedisHistory(client, "general", validate=validate, roles=roles, ttl=ttl)
    for history in (plain, other):
        STATES[state](RedisHistory(client, history.conversation_id, ttl=300), client)
    call = plain.core.append(messages)
    assert call.script is not None
    assert call.script.name == "append_small"
    assert outcome(plain, call) == outcome(other, general(other, messages))
    assert keys(client, plain) == keys(client, other)


def test_short_batches_without_kept_out_data_take_the_small_script() -> None:
    """A batch over ``SMALL_BATCH``, a large envelope (staged) or inline data kept outside
    the list go to the general script."""
    history = RedisHistory(redis.Redis(), "c")  # never sent

    def script_of(messages: list[Message]) -> str:
        call = history.core.append(messages)
        assert call.script is not None
        return call.script.name

    assert script_of([Message.user("u")]) == "append_small"
    assert script_of([calls("c1")]) == "append_small"
    assert script_of([Message.tool("r", tool_call_id="c1")]) == "append_small"
    assert script_of(BATCHES["a whole tool turn"]) == "append_small"
    pairs = [Message.user("u"), Message.assistant("a")] * (core.SMALL_BATCH // 2)
    assert script_of(pairs) == "append_small"
    assert script_of([*pairs, Message.user("u")]) == "append"
    assert script_of([Message.user(STAGED_TEXT)]) == "append"
    part = FilePart(data=bytes(range(256)) * 8, media_type="application/pdf")
    assert script_of([Message.user(["see", part])]) == "append"
