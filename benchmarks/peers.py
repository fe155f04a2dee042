"""The contestants of bench_peers.py: redis-history, its Redis chat-history peers, and the floor.

Each is a :class:`Store` used the way its own documentation shows, at default
settings: a real user's append, batch append and read. Peers are imported only
when used (``importlib``), so this module imports without them and mypy sees
them as ``Any`` whether or not the ``bench`` extra is installed. Every peer
stores tool calls and tool results natively: langchain as ``AIMessage.tool_calls``
and ``ToolMessage``; llama-index as ``ToolCallBlock`` blocks and ``role="tool"``
messages carrying ``tool_call_id``; the Agents SDK as ``function_call`` and
``function_call_output`` items.
"""

from __future__ import annotations

import importlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import redis
import redis.asyncio
from traffic import Msg

from redis_history import Message, RedisHistory, ToolCall
from redis_history.integrations.openai_agents import RedisHistorySession
from redis_history.store import codec, core
from redis_history.store.codec import encode_batch, encode_message
from redis_history.wire.lane import execute

__all__ = [
    "ASYNC_FLOOR",
    "COMPRESSION_VARIANTS",
    "CONTESTANTS",
    "FLOOR",
    "LANE_FLOOR",
    "MINIMAL_SCRIPT",
    "STAGING_VARIANTS",
    "Contestant",
    "RedisHistorySessionStore",
    "RedisHistoryStore",
    "Store",
    "new_id",
    "select",
    "to_message",
    "wire_bytes",
]


def to_message(message: Msg) -> Message:
    """A traffic message as a redis-history ``Message``."""
    if message.role == "user":
        return Message.user(message.content)
    if message.role == "tool":
        assert message.tool_call_id is not None
        return Message.tool(message.content, tool_call_id=message.tool_call_id)
    return Message.assistant(
        message.content,
        tool_calls=[
            ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls
        ],
    )


class Store:
    """One contestant on one conversation, used the way its documentation shows.

    ``prepare`` builds the contestant's own message objects before any timing
    (an application holds them already); the other methods are what is timed.
    They return ``None``/a value, or an awaitable for an asyncio API.
    """

    def __init__(self, url: str, conversation: str) -> None:
        self.url = url
        self.conversation = conversation

    def prepare(self, message: Msg) -> Any:
        raise NotImplementedError

    def append(self, native: Any) -> object:
        raise NotImplementedError

    def append_turn(self, natives: list[Any]) -> object:
        raise NotImplementedError

    def snapshot(self) -> object:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release the contestant's connections."""


def wire_bytes(message: dict[str, Any]) -> bytes:
    """A chat-completions message as compact UTF-8 JSON: what the floor stores, made inside
    its timed call (every contestant serialises its message there)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


class Floor(Store):
    """Raw redis-py: the chat-completions JSON, ``json.dumps`` of the message in the call, in
    a bare list."""

    def __init__(self, url: str, conversation: str) -> None:
        super().__init__(url, conversation)
        self.client = redis.Redis.from_url(url)
        self.key = f"floor:{conversation}"

    def prepare(self, message: Msg) -> dict[str, Any]:
        return message.wire

    def append(self, native: Any) -> object:
        return self.client.rpush(self.key, wire_bytes(native))

    def append_turn(self, natives: list[Any]) -> object:
        return self.client.rpush(self.key, *map(wire_bytes, natives))

    def snapshot(self) -> object:
        return [json.loads(item) for item in self.client.lrange(self.key, 0, -1)]

    async def aclose(self) -> None:
        self.client.close()


class MessageFloor(Floor):
    """The floor writing a turn as the peers without a batch call do: one ``RPUSH`` (one round
    trip) per message."""

    def append_turn(self, natives: list[Any]) -> object:
        for native in natives:
            self.client.rpush(self.key, wire_bytes(native))
        return None


class LaneFloor(Floor):
    """Raw ``RPUSH`` sent the way redis-history sends its commands (``wire.lane.execute``): a
    connection held across calls, not taken from the pool and given back each time."""

    def append(self, native: Any) -> object:
        return execute(self.client, ("RPUSH", self.key, wire_bytes(native)))


class AsyncFloor(Floor):
    """Raw ``redis.asyncio``: what any asyncio store pays before doing anything of its own."""

    def __init__(self, url: str, conversation: str) -> None:
        super().__init__(url, conversation)
        self.client.close()
        self.aclient = redis.asyncio.Redis.from_url(url)

    def append(self, native: Any) -> object:
        return self.aclient.rpush(self.key, wire_bytes(native))

    def append_turn(self, natives: list[Any]) -> object:
        return self.aclient.rpush(self.key, *map(wire_bytes, natives))

    def snapshot(self) -> object:
        async def read() -> list[Any]:
            return [json.loads(item) for item in await self.aclient.lrange(self.key, 0, -1)]

        return read()

    async def aclose(self) -> None:
        await self.aclient.aclose()


class RedisHistoryStore(Store):
    """redis-history: ``RedisHistory(client, conversation_id)``, plus one option at most."""

    options: dict[str, Any] = {}  # noqa: RUF012  (class-level constant, never mutated)

    def __init__(self, url: str, conversation: str) -> None:
        super().__init__(url, conversation)
        self.client = redis.Redis.from_url(url)
        self.history = RedisHistory(self.client, conversation, **self.options)

    def prepare(self, message: Msg) -> Message:
        return to_message(message)

    def append(self, native: Any) -> object:
        self.history.append(native)
        return None

    def append_turn(self, natives: list[Any]) -> object:
        self.history.append_many(natives)
        return None

    def snapshot(self) -> object:
        return self.history.snapshot()

    async def aclose(self) -> None:
        self.client.close()


class RedisHistoryHeuristic(RedisHistoryStore):
    """redis-history with ``token_counter="heuristic"``."""

    options: dict[str, Any] = {"token_counter": "heuristic"}  # noqa: RUF012


class SettingStore(RedisHistoryStore):
    """redis-history with a module constant (:attr:`name` of :attr:`module`) set to
    :attr:`value` around its own writes: what a setting buys, in the same run. Reads take
    whatever was written as it is."""

    module: ModuleType
    name: str
    value: int

    def setting(self, call: Any) -> object:
        saved = getattr(self.module, self.name)
        setattr(self.module, self.name, self.value)
        try:
            return call()
        finally:
            setattr(self.module, self.name, saved)

    def append(self, native: Any) -> object:
        return self.setting(lambda: self.history.append(native))

    def append_turn(self, natives: list[Any]) -> object:
        return self.setting(lambda: self.history.append_many(natives))


class NeverStaged(SettingStore):
    """``--staging``: ``core.STAGE_BYTES`` out of reach."""

    module = core
    name = "STAGE_BYTES"
    value = 1 << 62


class AlwaysStaged(SettingStore):
    """``--staging``: every append staged."""

    module = core
    name = "STAGE_BYTES"
    value = 0


class NeverCompressed(SettingStore):
    """``--compression``: ``codec.COMPRESS_BYTES`` out of reach."""

    module = codec
    name = "COMPRESS_BYTES"
    value = 1 << 62


class CompressedFrom1K(SettingStore):
    """``--compression``: texts of 1 KiB or more compressed."""

    module = codec
    name = "COMPRESS_BYTES"
    value = 1024


MINIMAL_SCRIPT = (
    "redis.call('RPUSH', KEYS[1], unpack(ARGV, 2)) "
    "return redis.call('HINCRBY', KEYS[2], 'total', ARGV[1])"
)
"""The minimal scripted append: the envelopes pushed and the token total bumped (the floor of
any atomic scripted write)."""


class MinimalScriptStore(RedisHistoryStore):
    """A reference, not a peer: what any store whose append is one atomic script pays at
    least. redis-history's own envelopes and estimate, sent the way it sends its commands,
    to :data:`MINIMAL_SCRIPT` (no role, pairing, exactly-once or TTL bookkeeping); read as
    redis-history reads."""

    def __init__(self, url: str, conversation: str) -> None:
        super().__init__(url, conversation)
        self.sha = self.client.script_load(MINIMAL_SCRIPT)
        self.keys = (self.history.keys.msgs, self.history.keys.meta)

    def encoded(self, natives: list[Any]) -> tuple[int, list[bytes]]:
        core = self.history.core
        if len(natives) == 1:
            envelope, tokens = encode_message(natives[0], core.counter, core.max_message_bytes)
            return tokens, [envelope]
        batch = encode_batch(natives, core.counter, core.max_message_bytes)
        return batch.tokens, batch.envelopes

    def append(self, native: Any) -> object:
        return self.append_turn([native])

    def append_turn(self, natives: list[Any]) -> object:
        tokens, envelopes = self.encoded(natives)
        return execute(self.client, ("EVALSHA", self.sha, 2, *self.keys, tokens, *envelopes))


class EncodeOnlyStore(MinimalScriptStore):
    """A reference, not a peer: redis-history's envelopes and estimate ``RPUSH``ed with no
    script at all: what encoding and pricing the message on the client costs alone."""

    def append_turn(self, natives: list[Any]) -> object:
        _, envelopes = self.encoded(natives)
        return execute(self.client, ("RPUSH", self.keys[0], *envelopes))


class LangChainStore(Store):
    """langchain-community ``RedisChatMessageHistory(session_id, url=...)``."""

    def __init__(self, url: str, conversation: str) -> None:
        super().__init__(url, conversation)
        module = importlib.import_module("langchain_community.chat_message_histories")
        self.messages = importlib.import_module("langchain_core.messages")
        self.history = module.RedisChatMessageHistory(session_id=conversation, url=url)

    def prepare(self, message: Msg) -> Any:
        m = self.messages
        if message.role == "user":
            return m.HumanMessage(content=message.content)
        if message.role == "tool":
            return m.ToolMessage(content=message.content, tool_call_id=message.tool_call_id)
        calls = [
            {"name": c.name, "args": c.arguments, "id": c.id, "type": "tool_call"}
            for c in message.tool_calls
        ]
        return m.AIMessage(content=message.content, tool_calls=calls)

    def append(self, native: Any) -> object:
        return self.history.add_message(native)

    def append_turn(self, natives: list[Any]) -> object:
        return self.history.add_messages(natives)

    def snapshot(self) -> object:
        return self.history.messages

    async def aclose(self) -> None:
        self.history.redis_client.close()


class LlamaIndexStore(Store):
    """llama-index ``RedisChatStore(redis_url=...)``, the conversation id as its key."""

    def __init__(self, url: str, conversation: str) -> None:
        super().__init__(url, conversation)
        module = importlib.import_module("llama_index.storage.chat_store.redis")
        self.types = importlib.import_module("llama_index.core.base.llms.types")
        self.store = module.RedisChatStore(redis_url=url)

    def prepare(self, message: Msg) -> Any:
        t = self.types
        if message.role == "user":
            return t.ChatMessage(role="user", content=message.content)
        if message.role == "tool":
            return t.ChatMessage(
                role="tool",
                content=message.content,
                additional_kwargs={"tool_call_id": message.tool_call_id},
            )
        blocks: list[Any] = [t.TextBlock(text=message.content)] if message.content else []
        blocks += [
            t.ToolCallBlock(tool_call_id=c.id, tool_name=c.name, tool_kwargs=c.arguments)
            for c in message.tool_calls
        ]
        return t.ChatMessage(role="assistant", blocks=blocks)

    def append(self, native: Any) -> object:
        return self.store.add_message(self.conversation, native)

    def append_turn(self, natives: list[Any]) -> object:
        # RedisChatStore has no batch append (set_messages replaces the list).
        for native in natives:
            self.store.add_message(self.conversation, native)
        return None

    def snapshot(self) -> object:
        return self.store.get_messages(self.conversation)

    async def aclose(self) -> None:
        self.store._redis_client.close()
        await self.store._aredis_client.aclose()


class AgentsStore(Store):
    """OpenAI Agents SDK ``RedisSession.from_url(session_id, url=...)`` (asyncio only).

    Items are what ``Runner`` stores: a user input item, the assistant's output
    message, one ``function_call`` item per tool call and a ``function_call_output``
    per tool result; one of our messages is one ``add_items`` call.
    """

    def __init__(self, url: str, conversation: str) -> None:
        super().__init__(url, conversation)
        module = importlib.import_module("agents.extensions.memory")
        self.session = module.RedisSession.from_url(conversation, url=url)
        self.items = 0

    def prepare(self, message: Msg) -> list[dict[str, Any]]:
        self.items += 1
        if message.role == "user":
            return [{"role": "user", "content": message.content}]
        if message.role == "tool":
            return [
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content,
                }
            ]
        out: list[dict[str, Any]] = []
        if message.content:
            out.append(
                {
                    "id": f"msg_{self.items:08d}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": message.content, "annotations": []}
                    ],
                }
            )
        out += [
            {
                "id": f"fc_{c.id}",
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
                "status": "completed",
            }
            for c in message.tool_calls
        ]
        return out

    def append(self, native: Any) -> object:
        return self.session.add_items(native)

    def append_turn(self, natives: list[Any]) -> object:
        return self.session.add_items([item for items in natives for item in items])

    def snapshot(self) -> object:
        return self.session.get_items()

    async def aclose(self) -> None:
        await self.session.close()


class RedisHistorySessionStore(AgentsStore):
    """redis-history's Agents SDK ``Session``: ``RedisHistorySession.from_url(url, session_id)``.

    The same items as the SDK's own ``RedisSession`` above, through the same protocol.
    """

    def __init__(self, url: str, conversation: str) -> None:
        Store.__init__(self, url, conversation)
        self.session = RedisHistorySession.from_url(url, conversation)
        self.items = 0

    async def aclose(self) -> None:
        await self.session.history.client.aclose()


@dataclass(frozen=True)
class Contestant:
    slug: str
    """The name ``--only`` takes."""
    label: str
    """The column header."""
    store: type[Store]
    modules: tuple[str, ...] = ()
    """Imported up front: a failure makes the contestant 'skipped'."""
    dists: tuple[str, ...] = ()
    """Distributions whose versions are printed."""
    per_call: str = ""
    """What one append and one read do, from the contestant's code."""


FLOOR = Contestant(
    "floor",
    "raw Redis floor",
    Floor,
    per_call=(
        "append: `json.dumps` of the chat-completions message, then `RPUSH`; read: `LRANGE` + "
        "`json.loads` per item"
    ),
)
MESSAGE_FLOOR = Contestant(
    "message-floor",
    "raw Redis floor, an RPUSH per message",
    MessageFloor,
    per_call="a turn as one `RPUSH` per message, each `json.dumps` in its call",
)
ASYNC_FLOOR = Contestant("async-floor", "raw redis.asyncio", AsyncFloor)
LANE_FLOOR = Contestant("lane-floor", "raw Redis on a held connection", LaneFloor)
CONTESTANTS = (
    Contestant(
        "redis-history",
        "redis-history (default)",
        RedisHistoryStore,
        dists=("redis-history",),
        per_call=(
            "append / append_many: one `EVALSHA` (role order, tool pairing, token total and the "
            "exactly-once ring checked and written inside the script); the message is counted "
            "on the client first (an estimate of o200k by default); read: `LRANGE`, one "
            "pydantic-core validation per envelope, the role rules included"
        ),
    ),
    Contestant(
        "redis-history",
        "redis-history (heuristic counter)",
        RedisHistoryHeuristic,
        per_call="as above, the count a length heuristic instead of tiktoken",
    ),
    Contestant(
        "redis-history",
        "reference: minimal scripted append",
        MinimalScriptStore,
        per_call=(
            "a reference, not a peer: redis-history's envelopes and estimate, one `EVALSHA` of "
            "a script that `RPUSH`es them and `HINCRBY`s a token total (no checks, no "
            "exactly-once), sent the way redis-history sends"
        ),
    ),
    Contestant(
        "redis-history",
        "reference: encode + RPUSH",
        EncodeOnlyStore,
        per_call=(
            "a reference, not a peer: redis-history's envelopes and estimate, one `RPUSH` "
            "(no script), sent the way redis-history sends"
        ),
    ),
    Contestant(
        "langchain",
        "langchain RedisChatMessageHistory",
        LangChainStore,
        modules=("langchain_community.chat_message_histories", "langchain_core.messages"),
        dists=("langchain-community", "langchain-core"),
        per_call=(
            "add_message: `LPUSH` of `json.dumps(message_to_dict(m))` (ASCII-escaped; plus "
            "`EXPIRE` when a ttl is set); add_messages loops add_message, one round trip per "
            "message; messages: `LRANGE`, reversed, `json.loads` + `messages_from_dict`; "
            "no checks of role order or tool pairing"
        ),
    ),
    Contestant(
        "llama-index",
        "llama-index RedisChatStore",
        LlamaIndexStore,
        modules=("llama_index.storage.chat_store.redis", "llama_index.core.base.llms.types"),
        dists=("llama-index-storage-chat-store-redis", "llama-index-core"),
        per_call=(
            "add_message: `RPUSH` of `model_dump_json()` (plus `EXPIRE` when a ttl is set); no "
            "batch append, so a turn is one round trip per message; get_messages: `LRANGE` + "
            "`ChatMessage.model_validate_json` per item; no checks"
        ),
    ),
    Contestant(
        "openai-agents",
        "Agents SDK RedisSession",
        AgentsStore,
        modules=("agents.extensions.memory",),
        dists=("openai-agents",),
        per_call=(
            "add_items (asyncio): `WATCH` of 3 keys, `TYPE` of 2 (immediate round trips), then "
            "`MULTI` `HSET` `HSETNX` `RPUSH` `HSET` `EXEC` in one pipeline, retried whole on a "
            "`WATCH` conflict (with a ttl: a third `TYPE`, `TIME` and 3 `PEXPIREAT`); "
            "get_items: `LRANGE` + `json.loads` per item; no checks"
        ),
    ),
    Contestant(
        "openai-agents",
        "redis-history (Agents SDK session)",
        RedisHistorySessionStore,
        per_call=(
            "add_items (asyncio): the items grouped into messages (a reply's items one "
            "assistant message), each kept verbatim in its metadata, then one `EVALSHA` as "
            "append_many (role order and tool pairing checked; a tail read and a second "
            "`EVALSHA` only when the SDK's order needs bridges); get_items: `LRANGE`, one "
            "pydantic-core validation per envelope, the items taken from the metadata"
        ),
    ),
)


STAGING_VARIANTS = (
    Contestant("staging", "redis-history, never staged", NeverStaged),
    Contestant("staging", "redis-history, every append staged", AlwaysStaged),
)
"""Added by ``--staging``: the default store beside the same store never and always staged."""

COMPRESSION_VARIANTS = (
    Contestant("compression", "redis-history, never compressed", NeverCompressed),
    Contestant("compression", "redis-history, compressed from 1 KiB", CompressedFrom1K),
)
"""Added by ``--compression``: the default store (texts of 2 KiB or more compressed) beside the
same store storing every text as JSON, and compressing from 1 KiB."""


def select(only: Sequence[str] | None) -> tuple[list[Contestant], dict[str, str]]:
    """The contestants to run and, for each one left out, why."""
    chosen: list[Contestant] = []
    skipped: dict[str, str] = {}
    for c in CONTESTANTS:
        if only and c.slug not in only:
            skipped[c.label] = "skipped: not selected (--only)"
            continue
        try:
            for module in c.modules:
                importlib.import_module(module)
        except Exception as exc:
            extra = "; install the bench extra: pip install -e '.[bench]'" if c.modules else ""
            skipped[c.label] = f"skipped: {type(exc).__name__}: {exc}{extra}"
            continue
        chosen.append(c)
    return chosen, skipped


def new_id(slug: str) -> str:
    return f"{slug}-{uuid.uuid4().hex[:12]}"
