"""RedisHistorySession meets the Agents SDK's Session protocol, its items and its Runner."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
from faults import FaultProxy
from redis.backoff import NoBackoff
from test_nesting import SHAPES, deep_text, deep_value

pytest.importorskip("agents", reason="the Agents SDK adapter needs openai-agents (test extra)")

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.memory import Session, SessionSettings, SQLiteSession
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from redis_history import (
    InvalidMessageError,
    Message,
    RedisHistory,
    StoreUnavailableError,
    ToolPairingError,
    UnsupportedPartError,
)
from redis_history.context import render
from redis_history.integrations.openai_agents import BRIDGE, ITEMS, RedisHistorySession
from redis_history.models import MAX_NESTING
from redis_history.parts import AudioPart, FilePart, ImagePart, TextPart, data_url
from redis_history.roles import RoleState
from redis_history.wire.scripts import script, script_names

T = TypeVar("T")

USER: Any = {"role": "user", "content": "Weather in Lisbon and Porto?"}
REASONING: Any = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "two cities: two calls"}],
    "encrypted_content": "gAAAAB...",
}
CALL_L: Any = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_l",
    "name": "weather",
    "arguments": '{"city": "Lisbon"}',
    "status": "completed",
}
CALL_P: Any = {**CALL_L, "id": "fc_2", "call_id": "call_p", "arguments": '{"city":"Porto"}'}
OUT_L: Any = {"type": "function_call_output", "call_id": "call_l", "output": '{"temp_c": 21}'}
OUT_P: Any = {"type": "function_call_output", "call_id": "call_p", "output": '{"temp_c": 19}'}
REPLY: Any = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Lisbon 21 °C, Porto 19 °C.", "annotations": []}],
}
MORE: Any = [
    {"type": "message", "role": "developer", "content": "Answer in French."},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Et ce plan ?"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        ],
    },
    {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "Lisbon"},
    },
    {
        "id": "ct_1",
        "type": "custom_tool_call",
        "call_id": "call_c",
        "name": "grep",
        "input": "a.*b",
    },
    {"type": "custom_tool_call_output", "call_id": "call_c", "output": "no match"},
    {"type": "item_reference", "id": "msg_0"},
    {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "Je ne peux pas."}],
    },
]
TURN: Any = [REASONING, CALL_L, CALL_P, OUT_L, OUT_P, REPLY]


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.real_redis)])
def aclient(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An asyncio client: fakeredis, or one on the session's flushed redis-server."""
    if request.param == "fakeredis":
        yield fakeredis.FakeAsyncRedis()
        return
    request.getfixturevalue("real_redis")  # flushed before the test
    yield redis.asyncio.Redis.from_url(request.getfixturevalue("redis_url"))


def run(aclient: Any, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh loop, then drop the client's connections made on it."""

    async def main() -> T:
        try:
            return await coro
        finally:
            await aclient.connection_pool.disconnect()

    return asyncio.run(main())


def session(aclient: Any, session_id: str = "s1", **options: Any) -> RedisHistorySession:
    return RedisHistorySession.from_client(aclient, session_id, **options)


def test_session_is_the_sdks_session_protocol() -> None:
    """The SDK's runtime-checkable protocol recognises it, with the id the history has."""
    s = session(fakeredis.FakeAsyncRedis(), "user-1")
    assert isinstance(s, Session)
    assert s.session_id == "user-1" == s.history.conversation_id


def test_items_of_every_shape_come_back_unchanged(aclient: Any) -> None:
    """Messages, reasoning, parallel calls and outputs, hosted and custom tool items, a
    refusal and an image part: get_items returns exactly the dicts add_items was given."""
    added: list[list[Any]] = [[USER], TURN, MORE]

    async def scenario() -> None:
        s = session(aclient)
        for items in added:
            await s.add_items(copy.deepcopy(items))
        everything = [item for items in added for item in items]
        assert await s.get_items() == everything
        for limit in range(1, len(everything) + 2):
            assert await s.get_items(limit) == everything[-limit:]
        assert await s.get_items(0) == []
        # the store holds them as messages it checked, its rules intact
        stored = await s.history.snapshot()
        RoleState().advance_all(stored)
        assert [m.role for m in stored][:5] == ["user", "assistant", "tool", "tool", "assistant"]
        assert [c.id for c in stored[1].tool_calls] == ["call_l", "call_p"]
        assert stored[1].tool_calls[0].arguments == {"city": "Lisbon"}
        assert stored[1].metadata[ITEMS] == [REASONING, CALL_L, CALL_P]
        assert stored[2].content == '{"temp_c": 21}'

    run(aclient, scenario())


def test_each_text_is_stored_once(aclient: Any) -> None:
    """A message's or an output's text is the stored message's content, not a second copy
    in the kept item; it reads back in its place."""
    long_output: Any = {**OUT_L, "output": "ZQ" * 500}
    parts: Any = {**REPLY, "content": [*REPLY["content"], {"type": "refusal", "refusal": "no"}]}

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items([USER, CALL_L, long_output, REPLY])
        raw = b"".join(await aclient.lrange(s.history.keys.msgs, 0, -1))
        assert raw.count(b"ZQZQ" * 200) == 1
        assert raw.count("Lisbon 21 °C".encode()) == 1
        assert raw.count(b"Weather in Lisbon and Porto?") == 1
        again: Any = {"role": "user", "content": "again"}
        await s.add_items([again, parts])  # a reply of two texts keeps its item whole
        assert await s.get_items() == [USER, CALL_L, long_output, REPLY, again, parts]

    run(aclient, scenario())


def test_limit_defaults_to_the_session_settings(aclient: Any) -> None:
    """``session_settings.limit`` is get_items' default; an explicit limit wins."""

    async def scenario() -> None:
        s = session(aclient, session_settings=SessionSettings(limit=2))
        await s.add_items([USER, *TURN])
        assert await s.get_items() == [OUT_P, REPLY]
        assert await s.get_items(3) == [OUT_L, OUT_P, REPLY]
        as_dict = session(aclient, session_settings={"limit": 1})
        assert await as_dict.get_items() == [REPLY]

    run(aclient, scenario())


@pytest.mark.real_redis
def test_concurrent_sessions_on_one_conversation_keep_every_turn_whole(redis_url: str) -> None:
    """Eight sessions (own clients) adding whole turns at once, as pods do: every item
    lands, each turn's items stay together and in order, and the store's rules hold."""

    def turn(w: int, n: int) -> list[Any]:
        return [
            {"role": "user", "content": f"w{w} t{n}"},
            {**CALL_L, "call_id": f"c{w}-{n}"},
            {**OUT_L, "call_id": f"c{w}-{n}"},
            {**REPLY, "id": f"msg_{w}_{n}"},
        ]

    async def writer(w: int) -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        s = session(client, "shared")
        for n in range(10):
            await s.add_items(turn(w, n))
        await client.aclose()

    async def scenario() -> list[Any]:
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.flushall()
        await asyncio.gather(*(writer(w) for w in range(8)))
        reader = session(client, "shared")
        items = await reader.get_items()
        RoleState().advance_all(await reader.history.snapshot())
        await client.aclose()
        return items

    items = asyncio.run(scenario())
    assert len(items) == 8 * 10 * 4
    turns = [items[i : i + 4] for i in range(0, len(items), 4)]
    assert sorted(t[0]["content"] for t in turns) == sorted(
        f"w{w} t{n}" for w in range(8) for n in range(10)
    )
    for t in turns:
        w, n = (int(x[1:]) for x in t[0]["content"].split())
        assert t == turn(w, n)
    for w in range(8):
        mine = [t[0]["content"] for t in turns if t[0]["content"].startswith(f"w{w} ")]
        assert mine == [f"w{w} t{n}" for n in range(10)]


def test_add_items_is_atomic_and_refuses_an_output_without_its_call(aclient: Any) -> None:
    """A call whose output answers no open call is refused whole: nothing of it is stored."""

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items([USER])
        orphan: Any = {"type": "function_call_output", "call_id": "nope", "output": "x"}
        with pytest.raises(ToolPairingError):
            await s.add_items([REPLY, {"role": "user", "content": "and?"}, orphan])
        assert await s.get_items() == [USER]
        assert await s.history.len() == 1

    run(aclient, scenario())


@pytest.mark.parametrize("shape", SHAPES)
def test_deep_arguments_or_items_are_refused_and_nothing_is_written(
    aclient: Any, shape: str
) -> None:
    """Call arguments nested MAX_NESTING levels are stored as the call's arguments; one level
    deeper, past the parser's limit, or ``"[" * 100000`` (json.loads' RecursionError) raise
    InvalidMessageError naming the call, as does an item nested past what its message's
    metadata holds; nothing of the call is written."""

    def call(arguments: str) -> Any:
        return {**CALL_L, "arguments": arguments}

    def deep_item(depth: int) -> Any:
        """An item nested ``depth`` levels; its message's metadata[ITEMS] adds two."""
        return {"role": "user", "content": "q", "extra": deep_value(depth - 1, shape)}

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items([USER])
        at_limit = call(deep_text(MAX_NESTING, shape))
        await s.add_items([at_limit])
        stored = await s.history.snapshot()
        assert stored[-1].tool_calls[0].arguments == deep_value(MAX_NESTING, shape)
        await s.add_items([OUT_L, REPLY, deep_item(MAX_NESTING - 2)])  # metadata[ITEMS] holds it
        before = await stored_keys(aclient)
        for depth in (MAX_NESTING + 1, 150, 100_000):
            item_depth = depth - 2
            with pytest.raises(
                InvalidMessageError, match=r"function_call 'call_l' arguments nests"
            ):
                await s.add_items([REPLY, USER, call(deep_text(depth, shape))])
            with pytest.raises(InvalidMessageError, match=r"item 1 in metadata\['openai_agents"):
                await s.add_items([REPLY, deep_item(item_depth)])
        with pytest.raises(InvalidMessageError, match=r"function_call 'call_l' arguments nests"):
            await s.add_items([REPLY, USER, call("[" * 100_000)])
        assert await stored_keys(aclient) == before
        assert await s.get_items() == [USER, at_limit, OUT_L, REPLY, deep_item(MAX_NESTING - 2)]

    run(aclient, scenario())


async def stored_keys(aclient: Any) -> dict[Any, Any]:
    """Every key's serialized value: equal dumps mean nothing was written."""
    return {key: await aclient.dump(key) for key in sorted(await aclient.keys("*"))}


@pytest.fixture
def faulted(fault_proxy: FaultProxy, real_redis: redis.Redis) -> str:
    """The URL of the fault proxy, every script loaded so a dropped reply is an applied one."""
    for name in script_names():
        real_redis.script_load(script(name).source)
    return fault_proxy.url


def no_retry(url: str) -> redis.asyncio.Redis:
    """A client that never re-sends a command: the caller sees the lost reply."""
    return redis.asyncio.Redis.from_url(url, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))


@pytest.mark.real_redis
def test_a_call_repeated_after_a_lost_reply_stores_its_items_once(
    faulted: str, fault_proxy: FaultProxy
) -> None:
    """add_items whose append landed but whose reply was lost raises StoreUnavailableError;
    the same call repeated stores the items once: bridged, or after another writer's turn,
    too; so does a repeat of a call that never reached Redis. Identical items given after a
    success, or after other items, are new and stored again."""
    again: Any = {"role": "user", "content": "Hello?"}
    other: Any = {"role": "user", "content": "other pod"}

    async def scenario() -> tuple[list[Any], list[Message]]:
        client, pod_client = no_retry(faulted), redis.asyncio.Redis.from_url(faulted)
        s, pod = session(client), session(pod_client)

        async def lost(items: list[Any], lands: int, match: bytes = b"EVALSHA") -> None:
            fault_proxy.drop_reply(match)
            dropped, before = fault_proxy.dropped, await pod.history.len()
            with pytest.raises(StoreUnavailableError):
                await s.add_items(copy.deepcopy(items))
            assert fault_proxy.dropped == dropped + 1, "the fault did not fire"
            assert await pod.history.len() == before + lands  # it landed

        await s.add_items([USER])
        await lost(TURN, lands=4)
        await s.add_items(copy.deepcopy(TURN))
        await pod.add_items([other])
        # a user input after a user input: refused, then bridged; the bridged append is lost
        await lost([again], lands=2, match=BRIDGE.encode())
        await s.add_items([again])
        await lost([REPLY], lands=1)
        await pod.add_items([other])  # another writer's turn before the repeat
        await s.add_items([REPLY])
        fault_proxy.refuse(True)  # a call that never reaches Redis
        with pytest.raises(StoreUnavailableError):
            await s.add_items([REPLY])
        fault_proxy.refuse(False)
        await client.connection_pool.disconnect()  # the outage closed them
        await pod_client.connection_pool.disconnect()
        await s.add_items([REPLY])
        await s.add_items([REPLY])  # after a success: a new reply (bridged)
        await lost([again], lands=1)
        await s.add_items([REPLY])  # other items
        await s.add_items([again])  # so this one is new
        items, stored = await s.get_items(), await s.history.snapshot()
        await client.aclose()
        await pod_client.aclose()
        return items, stored

    items, stored = asyncio.run(scenario())
    assert items == [USER, *TURN, other, again, REPLY, other, REPLY, REPLY, again, REPLY, again]
    assert [m.role for m in stored if m.metadata.get(BRIDGE)] == ["assistant", "user"]
    RoleState().advance_all(stored)


def test_an_open_call_is_accepted_and_answered_by_a_later_call(aclient: Any) -> None:
    """Mid-run, calls are stored before their outputs (a tool is running, an approval waits)."""

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items([USER, REASONING, CALL_L, CALL_P])
        await s.add_items([OUT_P])
        await s.add_items([OUT_L, REPLY])
        assert await s.get_items() == [USER, *TURN[:3], OUT_P, OUT_L, REPLY]

    run(aclient, scenario())


def test_the_sdks_looser_order_is_bridged_and_read_back_unchanged(aclient: Any) -> None:
    """A user input after a failed run's input, after tool outputs, while a call is left
    open, and a reply after a reply: stored with bridges that get_items never shows."""
    again: Any = {"role": "user", "content": "Hello?"}
    items: list[list[Any]] = [
        [USER],
        [again],  # the previous run failed after storing its input
        [CALL_L, OUT_L],  # a run that stopped at its tool's output
        [again],
        [CALL_P],  # a call never answered (the run was abandoned)
        [again],
        [REPLY],
        [REPLY],  # two replies in a row
    ]

    async def scenario() -> None:
        s = session(aclient)
        for batch in items:
            await s.add_items(copy.deepcopy(batch))
        assert await s.get_items() == [item for batch in items for item in batch]
        stored = await s.history.snapshot()
        RoleState().advance_all(stored)  # the store's rules hold, bridges included
        bridges = [m for m in stored if m.metadata.get(BRIDGE)]
        assert [(m.role, m.tool_call_id) for m in bridges] == [
            ("assistant", None),
            ("assistant", None),
            ("tool", "call_p"),  # then a user message may not follow a tool result:
            ("assistant", None),
            ("user", None),
        ]
        assert all(m.content == "" and ITEMS not in m.metadata for m in bridges)

    run(aclient, scenario())


def test_pop_item_returns_items_newest_first_until_none(aclient: Any) -> None:
    """Each pop removes the latest item only, also out of a reply holding several, until
    the session is empty; what remains reads back as the prefix."""
    added: list[list[Any]] = [[USER], TURN, [{"role": "user", "content": "again"}], [REPLY]]
    everything = [item for batch in added for item in batch]

    async def scenario() -> None:
        s = session(aclient)
        for batch in added:
            await s.add_items(copy.deepcopy(batch))
        for n in range(len(everything), 0, -1):
            assert await s.pop_item() == everything[n - 1]
            assert await s.get_items() == everything[: n - 1]
            RoleState().advance_all(await s.history.snapshot())
        assert await s.pop_item() is None
        assert await s.history.len() == 0

    run(aclient, scenario())


def test_pop_is_fenced_against_a_write_in_between(aclient: Any) -> None:
    """A write landing between a pop's read and its rewrite refuses the rewrite, and the
    pop reads again: it returns (and removes) the item that is latest by then."""
    later: Any = {"role": "user", "content": "meanwhile"}

    async def scenario() -> None:
        s = session(aclient)
        other = session(aclient)
        await s.add_items([USER, REASONING, REPLY])  # the reply: one message of two items
        replace = s.history.replace
        calls = 0

        async def racing_replace(*args: Any, **kwargs: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                await other.add_items([later])
            await replace(*args, **kwargs)

        s.history.replace = racing_replace
        assert await s.pop_item() == later
        assert calls == 1  # refused, then the pop found a single-item message to roll back
        assert await s.get_items() == [USER, REASONING, REPLY]

    run(aclient, scenario())


def test_a_pop_never_removes_what_was_appended_after_its_read(aclient: Any) -> None:
    """An item appended between a pop's read of the tail and its read of the whole list (the
    message to pop holds several items) is the one popped, not lost to the rewrite."""
    later: Any = {"role": "user", "content": "meanwhile"}
    first = [item for n in range(2) for item in numbered_turn(n)]

    async def scenario() -> None:
        s, other = session(aclient), session(aclient)
        await s.add_items([*first, USER, REASONING, REPLY])  # the last message: two items
        snapshot = s.history.snapshot
        calls = 0

        async def racing_snapshot() -> list[Message]:
            nonlocal calls
            calls += 1
            if calls == 1:
                await other.add_items([later])
            return await snapshot()

        s.history.snapshot = racing_snapshot
        assert await s.pop_item() == later
        assert calls == 1
        assert await s.get_items() == [*first, USER, REASONING, REPLY]

    run(aclient, scenario())


def numbered_turn(n: int) -> list[Any]:
    """Five distinct items: an input, a reply of reasoning and a call (one message), the
    call's output and the answer."""
    return [
        {"role": "user", "content": f"item {n}"},
        {**REASONING, "id": f"rs_{n}"},
        {**CALL_L, "id": f"fc_{n}", "call_id": f"call_{n}"},
        {**OUT_L, "call_id": f"call_{n}"},
        {**REPLY, "id": f"msg_{n}"},
    ]


@pytest.mark.real_redis
def test_racing_pops_return_each_item_exactly_once(redis_url: str, real_redis: redis.Redis) -> None:
    """Two clients pop 20 times each, started together behind one Barrier, from a session of
    30 items (single items and items sharing a message): each item is returned by exactly
    one pop, and the 10 pops left over return None."""
    items = [item for n in range(6) for item in numbered_turn(n)]
    clients = 2
    barrier = threading.Barrier(clients)

    async def fill() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await session(client, "shared").add_items(copy.deepcopy(items))
        await client.aclose()

    async def pops() -> list[Any]:
        client = redis.asyncio.Redis.from_url(redis_url)
        s = session(client, "shared")
        await client.ping()  # connected before the start
        barrier.wait()
        popped = [await s.pop_item() for _ in range(20)]
        await client.aclose()
        return popped

    asyncio.run(fill())
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda _: asyncio.run(pops()), range(clients)))
    popped = [item for result in results for item in result]
    assert sorted(map(json.dumps, filter(None, popped))) == sorted(map(json.dumps, items))
    assert popped.count(None) == 10
    assert RedisHistory(real_redis, "shared").len() == 0


@pytest.mark.real_redis
def test_a_pop_whose_reply_is_lost_returns_its_item_once(
    faulted: str, fault_proxy: FaultProxy
) -> None:
    """A pop whose rollback, or fenced replace, landed but whose reply was lost: redis-py's
    re-send is answered as applied and the pop returns its item; without retries the pop
    raises StoreUnavailableError and the session's next pop_item returns that item. Each
    item is returned once, in order, and removed once."""

    async def scenario() -> list[Any]:
        retrying = redis.asyncio.Redis(host=fault_proxy.host, port=fault_proxy.port)
        plain = no_retry(faulted)
        s, p = session(retrying), session(plain)
        await s.add_items([USER, *TURN])
        popped: list[Any] = []

        async def lost(pop: RedisHistorySession, raises: bool) -> None:
            fault_proxy.drop_reply(b"EVALSHA")
            dropped = fault_proxy.dropped
            if raises:
                with pytest.raises(StoreUnavailableError):
                    await pop.pop_item()
            else:
                popped.append(await pop.pop_item())
            assert fault_proxy.dropped == dropped + 1, "the fault did not fire"

        await lost(s, raises=False)  # a rollback
        await lost(p, raises=True)
        popped.append(await p.pop_item())
        popped.append(await s.pop_item())
        await lost(s, raises=False)  # a fenced replace: the message keeps two items
        await lost(p, raises=True)
        popped.append(await p.pop_item())
        popped.extend([await s.pop_item(), await p.pop_item(), await s.pop_item()])
        await retrying.aclose()
        await plain.aclose()
        return popped

    assert asyncio.run(scenario()) == [*reversed([USER, *TURN]), None]


def test_popping_an_output_reopens_its_call_and_takes_its_bridges(aclient: Any) -> None:
    """A popped output leaves its call open for a new one; a popped input takes the
    bridge written for it."""
    again: Any = {"role": "user", "content": "Hello?"}

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items([USER, CALL_L, OUT_L])
        assert await s.pop_item() == OUT_L
        retried: Any = {**OUT_L, "output": "retried"}
        await s.add_items([retried])
        await s.add_items([again])  # after a tool output: bridged
        assert await s.history.len() == 5
        assert await s.pop_item() == again
        assert await s.history.len() == 3  # the bridge went with it
        await s.add_items([REPLY])
        assert await s.get_items() == [USER, CALL_L, retried, REPLY]

    run(aclient, scenario())


def test_messages_written_by_others_read_as_responses_items(aclient: Any) -> None:
    """A compaction summary (or any message not written by the session) reads as the
    Responses format renders it, and the session goes on after it."""

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items([USER, *TURN])
        await s.history.splice_prefix(4, Message.system("Summary: weather asked."))
        assert await s.get_items() == [
            {"type": "message", "role": "system", "content": "Summary: weather asked."},
            REPLY,
        ]
        await s.add_items([{"role": "user", "content": "Thanks"}])
        assert len(await s.get_items()) == 3

    run(aclient, scenario())


def test_clear_session_removes_everything(aclient: Any) -> None:
    """clear_session deletes the conversation; the session starts over empty."""

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items([USER, *TURN])
        await s.clear_session()
        assert await s.get_items() == []
        assert await s.pop_item() is None
        await s.add_items([USER])
        assert await s.get_items() == [USER]

    run(aclient, scenario())


# --- images, files and audio --------------------------------------------------------------

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + (64).to_bytes(4, "big") * 2 + bytes(range(256)) * 8
)  # a 64 x 64 PNG's header, then bytes
PDF = b"%PDF-1.7\n" + b"stream" * 50
WAV = b"RIFF....WAVEfmt " * 8
PNG_URL = data_url(PNG, "image/png")
PDF_URL = data_url(PDF, "application/pdf")
ASKED: Any = {
    "role": "user",
    "content": [
        {"type": "input_text", "text": "What do the chart and the report say?"},
        {"type": "input_image", "image_url": PNG_URL, "detail": "high"},
        {"type": "input_file", "file_data": PDF_URL, "filename": "report.pdf"},
        {"type": "input_image", "file_id": "file-img1", "detail": "auto"},
    ],
}
SAID: Any = {
    "role": "user",
    "content": [
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"},
        }
    ],
}
CALL_SHOT: Any = {
    **CALL_L,
    "id": "fc_s",
    "call_id": "call_s",
    "name": "screenshot",
    "arguments": "{}",
}
SHOT: Any = {
    "type": "function_call_output",
    "call_id": "call_s",
    "output": [
        {"type": "input_text", "text": "The page:"},
        {"type": "input_image", "image_url": "https://example.com/s.png", "detail": "low"},
    ],
}


def test_images_files_and_audio_are_stored_as_parts_and_read_back_unchanged(
    aclient: Any,
) -> None:
    """A user input's images, file and audio and a tool output's screenshot are the stored
    messages' parts; get_items gives back the items unchanged; each byte is stored once."""

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items(copy.deepcopy([ASKED, CALL_SHOT, SHOT, REPLY, SAID]))
        assert await s.get_items() == [ASKED, CALL_SHOT, SHOT, REPLY, SAID]
        asked, _, shot, _, said = await s.history.snapshot()
        assert asked.parts == (
            TextPart(text="What do the chart and the report say?"),
            ImagePart(data=PNG, media_type="image/png", detail="high"),
            FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
            ImagePart(file_id="file-img1"),
        )
        assert shot.parts == (
            TextPart(text="The page:"),
            ImagePart(url="https://example.com/s.png", detail="low"),
        )
        assert said.parts == (AudioPart(data=WAV, format="wav"),)
        raw = b"".join(await aclient.lrange(s.history.keys.msgs, 0, -1))
        assert raw.count(base64.b64encode(PDF)[8:200]) == 1
        assert raw.count(b"What do the chart") == 1
        assert await s.pop_item() == SAID
        assert await s.get_items() == [ASKED, CALL_SHOT, SHOT, REPLY]

    run(aclient, scenario())


def test_a_session_history_reaches_every_model_api(aclient: Any) -> None:
    """What the SDK stored renders for chat completions (the image a data URL, the file
    inline), for Anthropic (the screenshot in its tool_result) and for Responses as it came;
    an image by file id, which chat's image_url cannot take, is refused by name."""
    asked: Any = {**ASKED, "content": ASKED["content"][:3]}

    async def scenario() -> None:
        s = session(aclient)
        await s.add_items(copy.deepcopy([asked, CALL_SHOT, SHOT, REPLY]))
        stored = await s.history.snapshot()
        chat = render(stored[:1], "openai_chat")["messages"][0]["content"]
        assert chat[1] == {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}}
        assert chat[2] == {"type": "file", "file": {"file_data": PDF_URL, "filename": "report.pdf"}}
        anthropic = render(stored, "anthropic")["messages"]
        assert anthropic[0]["content"][1]["source"]["type"] == "base64"
        assert anthropic[2]["content"][0]["content"][1] == {
            "type": "image",
            "source": {"type": "url", "url": "https://example.com/s.png"},
        }
        responses = render(stored, "openai_responses")["input"]
        assert responses[0]["content"] == asked["content"]
        assert responses[2] == SHOT
        await s.add_items([{"role": "user", "content": ASKED["content"][3:]}])
        with pytest.raises(UnsupportedPartError, match="image part given by file_id"):
            render((await s.history.snapshot())[-1:], "openai_chat")

    run(aclient, scenario())


def test_items_stored_before_parts_read_as_they_did(aclient: Any) -> None:
    """A message stored when the image was kept in the items alone (text content, no parts)
    reads back as the same items; one written by others with parts reads as Responses items
    (audio as the SDK's input_audio part)."""
    old_items = [MORE[1]]

    async def scenario() -> None:
        s = session(aclient)
        await s.history.append(
            Message.user("Et ce plan ?", metadata={ITEMS: copy.deepcopy(old_items)})
        )
        assert await s.get_items() == old_items
        await s.history.append(Message.assistant("Un plan de Lisbonne."))
        await s.history.append(Message.user(["Écoute :", AudioPart(data=WAV, format="wav")]))
        assert (await s.get_items())[-1] == {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Écoute :"}, SAID["content"][0]],
        }

    run(aclient, scenario())


@pytest.mark.real_redis
def test_a_call_after_a_lost_reply_with_another_image_stores_that_image(
    faulted: str, fault_proxy: FaultProxy
) -> None:
    """The repeat of a call is recognised by its items' parts too: after a lost reply, a call
    with another image (the same text) stores that image, not the first one again."""
    other: Any = copy.deepcopy(ASKED)
    other["content"][1]["image_url"] = data_url(PNG[:24] + PNG[24:][::-1], "image/png")

    async def scenario() -> list[Any]:
        client = no_retry(faulted)
        s = session(client)
        fault_proxy.drop_reply(b"EVALSHA")
        with pytest.raises(StoreUnavailableError):
            await s.add_items(copy.deepcopy([ASKED]))
        await s.add_items(copy.deepcopy([other]))
        items = await s.get_items()
        await client.aclose()
        return items

    assert asyncio.run(scenario()) == [ASKED, other]


# --- a Runner run against a local stub model ---------------------------------------------


class StubModel(Model):
    """A model that returns canned outputs, one per call, and records its inputs."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = outputs
        self.inputs: list[Any] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(copy.deepcopy(kwargs["input"]))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return json.dumps({"city": city, "temp_c": 21 if city == "Lisbon" else 19})


def canned() -> list[list[Any]]:
    def text(i: int, words: str) -> ResponseOutputMessage:
        return ResponseOutputMessage(
            id=f"msg_{i}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=words, annotations=[])],
        )

    def call(i: int, city: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(
            id=f"fc_{i}",
            type="function_call",
            call_id=f"call_{i}",
            name="weather",
            arguments=json.dumps({"city": city}),
            status="completed",
        )

    thought = ResponseReasoningItem(
        id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="two calls")]
    )
    return [
        [thought, call(1, "Lisbon"), call(2, "Porto")],
        [text(1, "Lisbon 21 °C, Porto 19 °C.")],
        [text(2, "Lisbon is warmer.")],
    ]


async def two_runs(s: Any) -> tuple[list[Any], StubModel]:
    model = StubModel(canned())
    agent = Agent(name="travel", instructions="Be brief.", tools=[weather], model=model)
    config = RunConfig(tracing_disabled=True)
    first = await Runner.run(agent, "Weather in Lisbon and Porto?", session=s, run_config=config)
    assert first.final_output == "Lisbon 21 °C, Porto 19 °C."
    second = await Runner.run(agent, "Which is warmer?", session=s, run_config=config)
    assert second.final_output == "Lisbon is warmer."
    return await s.get_items(), model


def test_runner_runs_on_the_session_as_on_the_sdks_own(aclient: Any, tmp_path: Any) -> None:
    """Two Runner.run turns (reasoning, parallel tool calls, answers) against a stub model:
    the session stores what the SDK's own SQLiteSession stores, and the model's second
    input is the same history."""

    async def scenario() -> None:
        ours, our_model = await two_runs(session(aclient, "travel"))
        reference = SQLiteSession("travel", str(tmp_path / "sdk.db"))
        theirs, their_model = await two_runs(reference)
        reference.close()
        assert ours == theirs
        assert our_model.inputs == their_model.inputs
        assert [i.get("type", "message") for i in ours] == [
            "message",
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
            "message",
            "message",
            "message",
        ]
        assert our_model.inputs[-1][:-1] == ours[:7]  # the second run saw the first

    run(aclient, scenario())
