"""A LangChain ``BaseChatMessageHistory`` kept in redis-history (extra ``langchain``).

LangChain's messages map to the store's roles both ways: ``HumanMessage`` ↔ ``user``,
``AIMessage`` ↔ ``assistant`` (its ``tool_calls`` ↔ the message's
:class:`~redis_history.ToolCall`\\ s, by id), ``ToolMessage`` ↔ ``tool``
(``tool_call_id``), ``SystemMessage`` ↔ ``system``; ``ChatMessage`` by its role, and the
chunk classes as their messages. The text is the stored ``content`` (what the store
prices); whatever else the LangChain message holds and the store has no field for (its
``id``, ``additional_kwargs``, ``response_metadata``, ``usage_metadata``, a list
``content``, a tool message's ``artifact`` and ``status``, the class) is kept in
``metadata[LANGCHAIN]``, so a message reads back equal to the one added.

The store's rules apply: role order and tool pairing are checked atomically on every
``add_messages`` (all of its messages are stored, or none), so a ``SystemMessage``
after the first message, two ``HumanMessage``\\ s in a row or a ``ToolMessage`` that
answers no call are refused (use a history with ``validate=False`` to store any order).
A tool call needs an id. Messages written by others (a compaction summary) read as
messages of their role.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, messages_from_dict
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "redis_history.integrations.langchain needs langchain-core: "
        "pip install 'redis-history[langchain]'"
    ) from exc

import redis
import redis.asyncio

from redis_history.models import Message, Role, ToolCall
from redis_history.store.history import AsyncRedisHistory, RedisHistory

__all__ = ["LANGCHAIN", "RedisHistoryChatMessageHistory", "from_langchain", "to_langchain"]

LANGCHAIN = "langchain"
"""The ``metadata`` key holding what a LangChain message has beyond the store's fields."""

ROLES: dict[str, Role] = {
    "human": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "tool": "tool",
    "ToolMessageChunk": "tool",
    "system": "system",
    "SystemMessageChunk": "system",
}
CHAT_ROLES: dict[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "developer": "system",
}
TYPES: dict[Role, str] = {"user": "human", "assistant": "ai", "tool": "tool", "system": "system"}
NATIVE = frozenset({"content", "tool_calls", "tool_call_id", "name", "type"})
"""Fields the store's own message carries."""


def _role(message: BaseMessage) -> Role:
    kind = message.type
    if kind in ROLES:
        return ROLES[kind]
    if kind in ("chat", "ChatMessageChunk"):
        role = getattr(message, "role", None)
        if role in CHAT_ROLES:
            return CHAT_ROLES[role]
    raise ValueError(f"a LangChain message of type {kind!r} has no role in the store")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [p if isinstance(p, str) else p.get("text", "") for p in content]
    return "".join(p for p in parts if isinstance(p, str))


def from_langchain(message: BaseMessage) -> Message:
    """The store's message for a LangChain message.

    Raises:
        ValueError: a type without a role here, a tool call without an id, or data that
            is not JSON.
    """
    role = _role(message)
    data = message.model_dump(mode="json", exclude_defaults=True)
    kept = {k: v for k, v in data.items() if k not in NATIVE}
    if not isinstance(message.content, str):
        kept["content"] = data.get("content", [])
    if message.type != TYPES[role]:
        kept["type"] = message.type
    calls = []
    for call in getattr(message, "tool_calls", None) or ():
        if not call.get("id"):
            raise ValueError(f"tool call {call.get('name')!r} has no id: the store pairs by id")
        calls.append(ToolCall(id=call["id"], name=call["name"], arguments=call.get("args") or {}))
    return Message(
        role=role,
        content=_text(message.content),
        tool_calls=tuple(calls),
        tool_call_id=getattr(message, "tool_call_id", None) if role == "tool" else None,
        name=message.name,
        metadata={LANGCHAIN: kept} if kept else {},
    )


def to_langchain(message: Message) -> BaseMessage:
    """The LangChain message for a stored message (equal to the one added, if it was)."""
    kept = message.metadata.get(LANGCHAIN)
    data: dict[str, Any] = dict(kept) if isinstance(kept, dict) else {}
    kind = data.pop("type", TYPES[message.role])
    data.setdefault("content", message.content)
    if message.name is not None:
        data["name"] = message.name
    if message.tool_calls:
        data["tool_calls"] = [
            {"name": c.name, "args": c.arguments, "id": c.id, "type": "tool_call"}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        data["tool_call_id"] = message.tool_call_id
    return messages_from_dict([{"type": kind, "data": data}])[0]


class RedisHistoryChatMessageHistory(BaseChatMessageHistory):
    """LangChain's chat message history on one redis-history conversation.

    Give it a :class:`~redis_history.RedisHistory` for the sync methods, an
    :class:`~redis_history.AsyncRedisHistory` for the async ones, or both (on the same
    conversation); :meth:`from_url` makes both. Async methods without an asyncio history
    run the sync ones in an executor, as LangChain's defaults do.
    """

    def __init__(
        self, history: RedisHistory | None = None, *, async_history: AsyncRedisHistory | None = None
    ) -> None:
        """Keep LangChain's messages in ``history`` and/or ``async_history``.

        Raises:
            ValueError: neither is given, or they name different conversations.
        """
        super().__init__()
        if history is None and async_history is None:
            raise ValueError("give a RedisHistory, an AsyncRedisHistory, or both")
        if history is not None and async_history is not None and history.keys != async_history.keys:
            raise ValueError(f"{history!r} and {async_history!r} are different conversations")
        self.history = history
        self.async_history = async_history

    @classmethod
    def from_url(cls, url: str, conversation_id: str, **options: Any) -> Self:
        """Both histories of ``conversation_id`` on new clients for ``url``; ``options``
        go to both (``namespace=``, ``ttl=``, ``validate=``...)."""
        return cls(
            RedisHistory(redis.Redis.from_url(url), conversation_id, **options),
            async_history=AsyncRedisHistory(
                redis.asyncio.Redis.from_url(url), conversation_id, **options
            ),
        )

    def _sync(self) -> RedisHistory:
        if self.history is None:
            raise TypeError("this chat history has an AsyncRedisHistory only: use the a* methods")
        return self.history

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the conversation, as LangChain messages."""
        return [to_langchain(m) for m in self._sync().snapshot()]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one atomic write: all of them or none.

        Raises:
            RoleOrderError: a message's role may not follow the one before it.
            ToolPairingError: a ``ToolMessage`` answers no open call, or calls are left
                unanswered before a new message.
            ValueError: a message has no role in the store, or a tool call no id.
        """
        self._sync().append_many([from_langchain(m) for m in messages])

    def clear(self) -> None:
        """Delete the conversation."""
        self._sync().delete()

    async def aget_messages(self) -> list[BaseMessage]:
        """See :attr:`messages`."""
        if self.async_history is None:
            return await super().aget_messages()
        return [to_langchain(m) for m in await self.async_history.snapshot()]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """See :meth:`add_messages`."""
        if self.async_history is None:
            await super().aadd_messages(messages)
            return
        await self.async_history.append_many([from_langchain(m) for m in messages])

    async def aclear(self) -> None:
        """See :meth:`clear`."""
        if self.async_history is None:
            await super().aclear()
            return
        await self.async_history.delete()
