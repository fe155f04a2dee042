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

Images, files and audio in a ``HumanMessage`` or ``ToolMessage``'s content are stored as
the message's :mod:`parts <redis_history.parts>`, which every wire format renders: blocks
in OpenAI's chat shape (``image_url``, ``input_audio``, ``file``), LangChain's v0 data
blocks (``{"type": "image", "source_type": "base64", "data": ..., "mime_type": ...}``,
``"url"``, ``"id"``, ``"text"``) and its v1 standard blocks (``image``, ``file``,
``audio`` and ``text-plain`` with ``base64``, ``url``, ``file_id`` or ``text``; a file's
name from ``filename`` or ``extras["filename"]``, an image's detail from
``extras["detail"]``). Their bytes are stored once: the kept copy of the content holds
``""`` where each part's data was, and ``metadata[INLINE]`` says where. Blocks no part
holds (video, audio by URL or in another encoding, provider-specific blocks) are kept in
the copy only, and no wire format sends them. An ``AIMessage`` or ``SystemMessage`` keeps
its blocks in the copy only, as the store's assistant and system messages hold text.
Messages stored before parts existed (an image in the copy alone) read back as they did;
messages with parts written by others read as v1 standard blocks.

The store's rules apply: role order and tool pairing are checked atomically on every
``add_messages`` (all of its messages are stored, or none), by the lenient role rules
unless the chat history is made with ``roles="strict"``: two ``HumanMessage``\\ s in a
row (a user who sends two messages before the model answers) and two ``AIMessage``\\ s
in a row are stored, while a ``SystemMessage`` after the first message, an ``AIMessage``
before any ``HumanMessage``, a ``ToolMessage`` that answers no call and any other message
while calls are unanswered are refused (use a history with ``validate=False`` to store
any order). A tool call needs an id. Messages written by others (a compaction summary) read as
messages of their role.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self, TypeVar

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
from pydantic import ValidationError

from redis_history.errors import InvalidMessageError
from redis_history.integrations._inline import place, put_back, take_out
from redis_history.models import Message, Role, ToolCall
from redis_history.parts import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    TextPart,
    decode_base64,
    from_openai_chat,
)
from redis_history.roles import Roles, check_roles
from redis_history.store.history import AsyncRedisHistory, RedisHistory

__all__ = [
    "INLINE",
    "LANGCHAIN",
    "RedisHistoryChatMessageHistory",
    "from_langchain",
    "to_langchain",
]

_H = TypeVar("_H", RedisHistory, AsyncRedisHistory)

LANGCHAIN = "langchain"
"""The ``metadata`` key holding what a LangChain message has beyond the store's fields."""
INLINE = "langchain_inline"
"""The ``metadata`` key saying where, in the kept copy of the content, each part's text or
bytes were taken out (``{"at": [block, key...], "part": index, "as": how it is written}``)."""
AUDIO_FORMATS: dict[str, Literal["wav", "mp3"]] = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}
"""The audio media types an :class:`~redis_history.parts.AudioPart` holds, and its format."""

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
        InvalidMessageError: a content block a part cannot hold as it is (base64 data that
            is not base64 or has no ``mime_type``), naming the block.
        ValueError: a type without a role here, a tool call without an id, or data that
            is not JSON.
    """
    role = _role(message)
    data = message.model_dump(mode="json", exclude_defaults=True)
    kept = {k: v for k, v in data.items() if k not in NATIVE}
    content: dict[str, Any] = {"content": _text(message.content)}
    inline: list[dict[str, Any]] = []
    if not isinstance(message.content, str):
        kept["content"] = data.get("content", [])
        if role in ("user", "tool") and (found := _parts(kept["content"], message.type)):
            parts, inline = found
            kept["content"], inline = take_out(kept["content"], parts, inline)
            content = {"parts": tuple(parts)}
    if message.type != TYPES[role]:
        kept["type"] = message.type
    calls = []
    for call in getattr(message, "tool_calls", None) or ():
        if not call.get("id"):
            raise ValueError(f"tool call {call.get('name')!r} has no id: the store pairs by id")
        calls.append(ToolCall(id=call["id"], name=call["name"], arguments=call.get("args") or {}))
    metadata: dict[str, Any] = {LANGCHAIN: kept} if kept else {}
    if inline:
        metadata[INLINE] = inline
    return Message(
        role=role,
        **content,
        tool_calls=tuple(calls),
        tool_call_id=getattr(message, "tool_call_id", None) if role == "tool" else None,
        name=message.name,
        metadata=metadata,
    )


def to_langchain(message: Message) -> BaseMessage:
    """The LangChain message for a stored message (equal to the one added, if it was)."""
    kept = message.metadata.get(LANGCHAIN)
    data: dict[str, Any] = dict(kept) if isinstance(kept, dict) else {}
    kind = data.pop("type", TYPES[message.role])
    inline = message.metadata.get(INLINE)
    if isinstance(data.get("content"), list) and isinstance(inline, list):
        data["content"] = put_back(data["content"], message.parts, inline)
    elif message.parts and "content" not in data:
        data["content"] = [standard_block(part) for part in message.parts]
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


def _parts(content: list[Any], kind: str) -> tuple[list[ContentPart], list[dict[str, Any]]] | None:
    """The parts ``content``'s blocks hold, with where each one's text or bytes are; ``None``
    when they are all text (the message stays text)."""
    parts: list[ContentPart] = []
    inline: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        try:
            found = _block_part(block)
        except (ValidationError, InvalidMessageError) as exc:
            problem = exc.message if isinstance(exc, InvalidMessageError) else _problems(exc)
            raise InvalidMessageError(
                f"content block {index} of a LangChain {kind} message: {problem}"
            ) from None
        if found is None:
            continue
        part, at, written = found
        if at is not None and written is not None:
            inline.append(place([index, *at], len(parts), written))
        parts.append(part)
    if all(isinstance(part, TextPart) for part in parts):
        return None
    return parts, inline


def _problems(exc: ValidationError) -> str:
    return "; ".join(error["msg"] for error in exc.errors())


_Found = tuple[ContentPart, list[str] | None, str | None]
"""A block's part, where in the block its text or bytes are, and how they are written
(``"text"``, ``"base64"``, ``"data_url"``, ``"utf8"``)."""


def _block_part(block: Any) -> _Found | None:
    """The part a content block holds; ``None`` for a block no part holds."""
    if isinstance(block, str):
        return TextPart(text=block), [], "text"
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    if kind == "text" and "source_type" not in block and isinstance(block.get("text"), str):
        return TextPart(text=block["text"]), ["text"], "text"
    if kind == "image_url":
        image = block.get("image_url")
        return (
            from_openai_chat(block),
            ["image_url", "url"] if isinstance(image, Mapping) else ["image_url"],
            "data_url",
        )
    if kind == "input_audio":
        return from_openai_chat(block), ["input_audio", "data"], "base64"
    if kind == "file" and isinstance(block.get("file"), Mapping):
        return from_openai_chat(block), ["file", "file_data"], "data_url"
    if kind in ("image", "file", "audio", "text-plain"):
        return _data_block(block, kind)
    return None


def _data_block(block: Mapping[str, Any], kind: str) -> _Found | None:
    """A LangChain data block (v0: ``source_type``; v1: ``base64``, ``url``, ``file_id``,
    ``text``) as a part."""
    v0 = "source_type" in block
    if v0:
        source = block.get("source_type")
    else:
        source = next((k for k in ("base64", "url", "file_id", "text") if k in block), None)
    media_type = block.get("mime_type")
    if kind == "text-plain":
        media_type = media_type or "text/plain"
    fields: dict[str, Any]
    at: list[str] | None = None
    written = None
    if source == "base64":
        key = "data" if v0 else "base64"
        data = decode_base64(block.get(key), f"its {key}")
        fields, at, written = {"data": data, "media_type": media_type}, [key], "base64"
    elif source == "url":
        fields, at, written = (
            {"url": block.get("url"), "media_type": media_type},
            ["url"],
            "data_url",
        )
    elif source in ("id", "file_id"):
        fields = {"file_id": block.get(source), "media_type": media_type}
    elif source == "text" and isinstance(block.get("text"), str) and kind in ("file", "text-plain"):
        data = block["text"].encode("utf-8", "surrogatepass")
        fields, at, written = (
            {"data": data, "media_type": media_type or "text/plain"},
            ["text"],
            "utf8",
        )
    else:
        return None
    extras = block.get("extras")
    extras = extras if isinstance(extras, Mapping) else {}
    if kind == "image":
        return ImagePart(**fields, detail=extras.get("detail")), at, written
    if kind == "audio":
        audio = AUDIO_FORMATS.get(str(fields.get("media_type")))
        if "data" not in fields or audio is None:
            return None  # audio by URL or file id, or not wav or mp3: no part holds it
        return AudioPart(data=fields["data"], format=audio), at, written
    return FilePart(**fields, filename=_filename(block, extras)), at, written


def _filename(block: Mapping[str, Any], extras: Mapping[str, Any]) -> str | None:
    """A file block's name, where LangChain's OpenAI converter reads it."""
    for holder in (block, extras, block.get("metadata")):
        if isinstance(holder, Mapping) and isinstance(holder.get("filename"), str):
            return str(holder["filename"])
    return None


def standard_block(part: ContentPart) -> dict[str, Any]:
    """``part`` as a LangChain v1 standard content block (``text``, ``image``, ``file``,
    ``audio``); an image's detail and a file's name in ``extras``."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, AudioPart):
        return {
            "type": "audio",
            "base64": base64.b64encode(part.data).decode(),
            "mime_type": part.media_type,
        }
    block: dict[str, Any] = {"type": part.type}
    if part.data is not None:
        block["base64"] = base64.b64encode(part.data).decode()
    elif part.url is not None:
        block["url"] = part.url
    else:
        block["file_id"] = part.file_id
    if part.media_type is not None:
        block["mime_type"] = part.media_type
    named: dict[str, str | None] = (
        {"detail": part.detail} if isinstance(part, ImagePart) else {"filename": part.filename}
    )
    extras = {k: v for k, v in named.items() if v is not None}
    if extras:
        block["extras"] = extras
    return block


class RedisHistoryChatMessageHistory(BaseChatMessageHistory):
    """LangChain's chat message history on one redis-history conversation.

    Give it a :class:`~redis_history.RedisHistory` for the sync methods, an
    :class:`~redis_history.AsyncRedisHistory` for the async ones, or both (on the same
    conversation); :meth:`from_url` makes both. Async methods without an asyncio history
    run the sync ones in an executor, as LangChain's defaults do.
    """

    def __init__(
        self,
        history: RedisHistory | None = None,
        *,
        async_history: AsyncRedisHistory | None = None,
        roles: Roles = "lenient",
    ) -> None:
        """Keep LangChain's messages in ``history`` and/or ``async_history``.

        Args:
            history: the history the sync methods use.
            async_history: the history the async methods use.
            roles: the role rules ``add_messages`` is checked by, whatever the histories'
                own options say (:attr:`HistoryOptions.roles
                <redis_history.HistoryOptions.roles>`): ``"lenient"``, as LangChain's
                chat histories store messages in any order, or ``"strict"``. A history
                made with ``validate=False`` stays unchecked.

        Raises:
            ValueError: neither is given, they name different conversations, or ``roles``
                names no rules.
        """
        super().__init__()
        check_roles(roles)
        if history is None and async_history is None:
            raise ValueError("give a RedisHistory, an AsyncRedisHistory, or both")
        if history is not None and async_history is not None and history.keys != async_history.keys:
            raise ValueError(f"{history!r} and {async_history!r} are different conversations")
        self.history = _with_roles(history, roles)
        self.async_history = _with_roles(async_history, roles)

    @classmethod
    def from_url(cls, url: str, conversation_id: str, **options: Any) -> Self:
        """Both histories of ``conversation_id`` on new clients for ``url``; ``options``
        go to both (``namespace=``, ``ttl=``, ``validate=``...), but ``roles=`` to the
        chat history (lenient unless given)."""
        roles = options.pop("roles", "lenient")
        return cls(
            RedisHistory(redis.Redis.from_url(url), conversation_id, **options),
            async_history=AsyncRedisHistory(
                redis.asyncio.Redis.from_url(url), conversation_id, **options
            ),
            roles=roles,
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


def _with_roles(history: _H | None, roles: Roles) -> _H | None:
    """``history``, or a history of its conversation on its client whose writes follow the
    ``roles`` rules."""
    if history is None or history.options.roles == roles:
        return history
    options = history.options.merged({"roles": roles})
    return type(history)(
        history.client, history.conversation_id, namespace=history.namespace, options=options
    )
