"""Requests in every wire format, and what the model returned parsed back into messages.

:func:`render` turns a history into the keyword arguments of one model call, so that
``client.chat.completions.create(model=..., **request)``,
``client.responses.create(model=..., **request)`` and
``client.messages.create(model=..., max_tokens=..., **request)`` take it as it is:

- ``"openai_chat"``: ``{"messages": [...]}``, the system prompt first, each message as
  :meth:`Message.to_openai <redis_history.models.Message.to_openai>` writes it.
- ``"openai_responses"``: ``{"instructions": ..., "input": [...]}``; each message becomes a
  ``message`` item, each tool call a ``function_call`` item after its message's text, each
  tool result a ``function_call_output`` item.
- ``"anthropic"``: ``{"system": [...], "messages": [...]}``; system messages (the prompt,
  then summaries written by compaction, in order) are text blocks of ``system``, since
  Anthropic has no system role among messages; tool calls are ``tool_use`` blocks after
  the text; tool results are ``tool_result`` blocks, and consecutive same-role messages
  (parallel results, a user message right after them) merge into one turn, so that user
  and assistant alternate strictly.

:func:`parse` reads such a request back, and :func:`parse_response` reads a model's reply
(a chat completion, a Responses ``Response``, an Anthropic ``Message``; a dict or the
SDK's own object) into one assistant :class:`~redis_history.models.Message`, ready to
append: call ids kept, arguments decoded from JSON. Consecutive assistant output (text,
tool calls, several ``message`` items) becomes one message, its texts joined in order;
content that is not text (images, audio, files, server tools) raises ``ValueError``
rather than being dropped.

What the formats cannot carry, and how some of it is kept in ``metadata``:

- **Every format** drops ``id``, ``created_at`` and ``metadata`` (parsing makes new ones),
  except the keys below; an assistant's text is placed before its tool calls.
- ``"openai_chat"`` keeps ``name`` (not on tool messages: the API has no such field).
  Tool errors and reasoning have no field there: an error is its result's text.
- ``"openai_responses"`` drops ``name``. ``reasoning`` output items are kept in the
  assistant message's ``metadata["openai_reasoning"]`` and sent back, before it, in this
  format only.
- ``"anthropic"`` drops ``name``. A ``tool_result`` with ``is_error`` parses to a tool
  message with ``metadata["is_error"] = True``, which renders as ``"is_error": true``.
  ``thinking`` and ``redacted_thinking`` blocks are kept in ``metadata["anthropic_thinking"]``
  and sent back first in the assistant's turn (the API needs them in a tool loop). System
  messages with empty text are left out (the API refuses empty text blocks); merged
  same-role messages parse back as one, their texts joined.
- A refusal (``refusal`` in a chat completion or a Responses output) is kept as the
  message's text, with ``metadata["refusal"] = True``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from redis_history.errors import InvalidMessageError
from redis_history.models import MAX_NESTING, Message, ToolCall
from redis_history.store.base import History
from redis_history.store.history import AsyncRedisHistory

__all__ = [
    "ANTHROPIC_THINKING",
    "IS_ERROR",
    "OPENAI_REASONING",
    "REFUSAL",
    "WIRE_FORMATS",
    "WireFormat",
    "ainto_request",
    "into_request",
    "parse",
    "parse_response",
    "render",
    "unknown_format",
]

WireFormat = Literal["openai_chat", "openai_responses", "anthropic"]
"""A model API's request format: chat completions, the Responses API, Anthropic Messages."""
WIRE_FORMATS: tuple[WireFormat, ...] = get_args(WireFormat)
"""Every :data:`WireFormat`."""

IS_ERROR = "is_error"
"""``metadata`` key of a tool message whose result is an error (Anthropic's ``is_error``)."""
REFUSAL = "refusal"
"""``metadata`` key of an assistant message whose text is the model's refusal."""
OPENAI_REASONING = "openai_reasoning"
"""``metadata`` key: the Responses API ``reasoning`` items that came before this message."""
ANTHROPIC_THINKING = "anthropic_thinking"
"""``metadata`` key: the Anthropic ``thinking`` / ``redacted_thinking`` blocks of this turn."""

Request = dict[str, Any]
"""The keyword arguments of one model call, without the model's name and options."""


def render(
    messages: Sequence[Message], format: WireFormat, system_prompt: str | None = None
) -> Request:
    """Render messages as the request of one model call in ``format``.

    Args:
        messages: The conversation, oldest first (a snapshot, or a fitted part of it).
        format: ``"openai_chat"``, ``"openai_responses"`` or ``"anthropic"``.
        system_prompt: Sent before everything else: the first chat message, the
            Responses ``instructions``, the first block of Anthropic's ``system``.

    Returns:
        The call's keyword arguments: ``{"messages": ...}``, ``{"instructions": ...,
        "input": ...}`` or ``{"system": ..., "messages": ...}`` (the instructions and the
        system only when there is one).

    Raises:
        ValueError: ``format`` is not a :data:`WireFormat`.
    """
    if format == "openai_chat":
        return _render_openai_chat(messages, system_prompt)
    if format == "openai_responses":
        return _render_openai_responses(messages, system_prompt)
    if format == "anthropic":
        return _render_anthropic(messages, system_prompt)
    raise unknown_format(format)


def parse(request: Any, format: WireFormat) -> list[Message]:
    """Parse a request (what :func:`render` returns, or its bare list) into messages.

    Args:
        request: ``{"messages": [...]}`` or the list of chat messages;
            ``{"instructions": ..., "input": [...]}`` or the list of Responses input items
            (a string ``input`` is one user message); ``{"system": ..., "messages": [...]}``
            or the list of Anthropic messages. Dicts or the SDKs' objects.
        format: The request's :data:`WireFormat`.

    Returns:
        The messages, a system message first for a system prompt or instructions.

    Raises:
        InvalidMessageError: Tool call arguments that are not a JSON object or nest deeper
            than ``MAX_NESTING``, naming the call.
        ValueError: Content that is not text, an unknown role or item type, or an unknown
            ``format``.
    """
    data = _plain(request)
    if format == "openai_chat":
        messages = data.get("messages", ()) if isinstance(data, Mapping) else data
        return [_chat_message(_plain(m)) for m in messages]
    if format == "openai_responses":
        return _parse_responses_request(data)
    if format == "anthropic":
        return _parse_anthropic_request(data)
    raise unknown_format(format)


def parse_response(response: Any, format: WireFormat, *, choice: int = 0) -> Message:
    """Parse a model's reply into the assistant message to append.

    Args:
        response: A chat completion (or one ``choices[i].message``), a Responses API
            ``Response`` (or its ``output`` list), an Anthropic ``Message``; a dict or
            the SDK's object.
        format: The reply's :data:`WireFormat`.
        choice: Which of a chat completion's ``choices`` to read.

    Returns:
        One assistant message: its text (texts of several parts or items joined in
        order), its tool calls with their ids and decoded arguments.

    Raises:
        InvalidMessageError: Tool call arguments that are not a JSON object or nest deeper
            than ``MAX_NESTING``, naming the call; an SDK object nested too deep for pydantic
            to dump, naming the field.
        ValueError: Output that is not text or a function call, a reply that is not the
            assistant's, an Anthropic ``input`` nested too deep (pydantic's
            ``ValidationError`` naming ``arguments``), or an unknown ``format``.
    """
    data = _plain(response)
    if format == "openai_chat":
        if isinstance(data, Mapping) and "choices" in data:
            data = _plain(data["choices"][choice]["message"])
        if data.get("audio"):
            raise ValueError("the reply holds audio, which a message cannot carry")
        return _chat_message(data)
    if format == "openai_responses":
        items = data.get("output", ()) if isinstance(data, Mapping) else data
        return _single_reply(_ResponsesReader().read(items), format)
    if format == "anthropic":
        if data.get("role", "assistant") != "assistant":
            raise ValueError(f"an Anthropic reply has role assistant, not {data.get('role')!r}")
        return _anthropic_assistant(_blocks(data.get("content")))
    raise unknown_format(format)


def into_request(
    history: History, system_prompt: str | None = None, *, format: WireFormat
) -> Request:
    """The request for the next model call: ``history``'s snapshot rendered in ``format``.

    A function of the context layer rather than a method of the histories, because the
    store never imports this layer.

    Args:
        history: Any :class:`~redis_history.History` (Redis, Redis Cluster, in memory).
        system_prompt: Sent before the history's own messages (see :func:`render`).
        format: ``"openai_chat"``, ``"openai_responses"`` or ``"anthropic"``.

    Returns:
        The call's keyword arguments, as :func:`render` makes them.

    Raises:
        ValueError: ``format`` is not a :data:`WireFormat`.
        StoreUnavailableError: Redis could not be reached for the snapshot.
    """
    return render(history.snapshot(), format, system_prompt)


async def ainto_request(
    history: AsyncRedisHistory, system_prompt: str | None = None, *, format: WireFormat
) -> Request:
    """:func:`into_request` for an :class:`~redis_history.AsyncRedisHistory`."""
    return render(await history.snapshot(), format, system_prompt)


def unknown_format(format: object) -> ValueError:
    """The error for a wire format that is not one of :data:`WIRE_FORMATS`."""
    return ValueError(f"unknown wire format {format!r}; expected one of {', '.join(WIRE_FORMATS)}")


def _plain(value: Any) -> Any:
    """A dict (or list) for an SDK object, which is a pydantic model; other values as they are."""
    return sdk_data(value, exclude_none=True)


def sdk_data(value: Any, **options: Any) -> Any:
    """An SDK object (a pydantic model) as JSON data, ``model_dump(mode="json", **options)``;
    other values as they are.

    Raises:
        InvalidMessageError: naming the field: pydantic cannot dump it, because it nests
            past the serializer's own limit (about 255 levels, deeper than ``MAX_NESTING``)
            or holds what JSON cannot.
    """
    if not isinstance(value, BaseModel):
        return value
    try:
        return value.model_dump(mode="json", **options)
    except (ValueError, TypeError) as exc:  # deep lists in a union: pydantic's TypeError
        where = type(value).__name__ + _undumpable(value)
        raise InvalidMessageError(
            f"{where} nests deeper than MAX_NESTING = {MAX_NESTING} levels, or holds what "
            "JSON cannot"
        ) from exc


def _undumpable(model: BaseModel) -> str:
    """Where under ``model`` is the field pydantic cannot dump: ``.content[1].input``."""
    for name, value in model:
        for index, child in enumerate(value) if isinstance(value, list) else [(None, value)]:
            try:
                to_jsonable_python(child)
            except (ValueError, TypeError):
                at = f".{name}" if index is None else f".{name}[{index}]"
                return at + (_undumpable(child) if isinstance(child, BaseModel) else "")
    return ""


def _kept(message: Message, key: str) -> list[Any]:
    """The raw items kept under ``metadata[key]``, if they are a list."""
    value = message.metadata.get(key)
    return list(value) if isinstance(value, list) else []


# --- OpenAI chat completions -------------------------------------------------------------


def _render_openai_chat(messages: Sequence[Message], system_prompt: str | None) -> Request:
    out: list[dict[str, Any]] = []
    if system_prompt is not None:
        out.append({"role": "system", "content": system_prompt})
    out.extend(message.to_openai() for message in messages)
    return {"messages": out}


def _chat_message(data: Mapping[str, Any]) -> Message:
    for call in data.get("tool_calls") or ():
        if call.get("type", "function") != "function":
            raise ValueError(f"tool call of type {call.get('type')!r} is not supported")
    refusal = data.get("refusal")
    if refusal and not data.get("content"):
        return Message.from_openai({**data, "content": refusal}, metadata={REFUSAL: True})
    return Message.from_openai(data)


# --- OpenAI Responses API ----------------------------------------------------------------


def _render_openai_responses(messages: Sequence[Message], system_prompt: str | None) -> Request:
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content,
                }
            )
            continue
        if message.role == "assistant":
            items.extend(_kept(message, OPENAI_REASONING))
        if message.content or not message.tool_calls:
            items.append({"type": "message", "role": message.role, "content": message.content})
        items.extend(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            }
            for call in message.tool_calls
        )
    if system_prompt is None:
        return {"input": items}
    return {"instructions": system_prompt, "input": items}


def _parse_responses_request(data: Any) -> list[Message]:
    if not isinstance(data, Mapping):
        return _ResponsesReader().read(data)
    out = []
    if data.get("instructions") is not None:
        out.append(Message.system(data["instructions"]))
    items = data.get("input", ())
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    return out + _ResponsesReader().read(items)


@dataclass
class _Reply:
    """An assistant message being gathered from consecutive output items or blocks."""

    texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)
    refusal: bool = False

    def __bool__(self) -> bool:
        return bool(self.texts or self.calls or self.kept)

    def message(self, kept_key: str) -> Message:
        metadata: dict[str, Any] = {}
        if self.kept:
            metadata[kept_key] = self.kept
        if self.refusal:
            metadata[REFUSAL] = True
        return Message.assistant("".join(self.texts), tool_calls=self.calls, metadata=metadata)


class _ResponsesReader:
    """Responses API items (input or output) to messages, in one pass."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        self.reply = _Reply()

    def read(self, items: Iterable[Any]) -> list[Message]:
        for raw in items:
            item = _plain(raw)
            kind = item.get("type", "message")  # an easy input message may leave it out
            if kind == "message" and item.get("role") == "assistant":
                text, refusal = _responses_text(item.get("content"))
                self.reply.texts.append(text)
                self.reply.refusal |= refusal
            elif kind == "function_call":
                self.reply.calls.append(_tool_call(item.get("call_id"), item))
            elif kind == "reasoning":
                self.reply.kept.append(item)
            elif kind == "message":
                self._flush()
                role = "system" if item.get("role") == "developer" else item.get("role")
                self.out.append(Message(role=role, content=_responses_text(item.get("content"))[0]))
            elif kind == "function_call_output":
                self._flush()
                output, _ = _responses_text(item.get("output"))
                self.out.append(Message.tool(output, tool_call_id=item.get("call_id", "")))
            else:
                raise ValueError(f"Responses item of type {kind!r} is not supported")
        self._flush()
        return self.out

    def _flush(self) -> None:
        if self.reply:
            self.out.append(self.reply.message(OPENAI_REASONING))
            self.reply = _Reply()


def _responses_text(content: Any) -> tuple[str, bool]:
    """The text of a Responses content list (or string), and whether it holds a refusal."""
    if content is None or isinstance(content, str):
        return content or "", False
    texts, refusal = [], False
    for part in map(_plain, content):
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            texts.append(str(part.get("text", "")))
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
            refusal = True
        else:
            raise ValueError(f"content part of type {kind!r} is not supported")
    return "".join(texts), refusal


def _single_reply(messages: list[Message], format: WireFormat) -> Message:
    if not messages:
        return Message.assistant("")
    if len(messages) > 1 or messages[0].role != "assistant":
        roles = ", ".join(m.role for m in messages)
        raise ValueError(f"a {format} reply holds one assistant message, not: {roles}")
    return messages[0]


def _tool_call(call_id: Any, item: Mapping[str, Any]) -> ToolCall:
    """A call from a flat item (``name``, ``arguments`` as JSON text or an object)."""
    return ToolCall.from_openai(
        {
            "id": call_id or "",
            "function": {"name": item.get("name"), "arguments": item.get("arguments")},
        }
    )


# --- Anthropic Messages ------------------------------------------------------------------


def _render_anthropic(messages: Sequence[Message], system_prompt: str | None) -> Request:
    system = [] if system_prompt is None else [system_prompt]
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        if message.role == "system":
            system.append(message.content)
        elif message.role == "user":
            add("user", [{"type": "text", "text": message.content}])
        elif message.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.metadata.get(IS_ERROR) is True:
                block["is_error"] = True
            add("user", [block])
        else:
            blocks = _kept(message, ANTHROPIC_THINKING)
            if message.content or not message.tool_calls:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                for call in message.tool_calls
            )
            add("assistant", blocks)
    blocks = [{"type": "text", "text": text} for text in system if text]
    return {"system": blocks, "messages": turns} if blocks else {"messages": turns}


def _parse_anthropic_request(data: Any) -> list[Message]:
    out: list[Message] = []
    if isinstance(data, Mapping):
        system = data.get("system")
        if isinstance(system, str):
            out.append(Message.system(system))
        else:
            out.extend(Message.system(_anthropic_text(block)) for block in system or ())
        data = data.get("messages", ())
    for raw in data:
        turn = _plain(raw)
        role, blocks = turn.get("role"), _blocks(turn.get("content"))
        if role == "assistant":
            out.append(_anthropic_assistant(blocks))
        elif role == "user":
            out.extend(_anthropic_user(blocks))
        elif role == "system":
            out.append(Message.system("".join(_anthropic_text(block) for block in blocks)))
        else:
            raise ValueError(f"an Anthropic message has role user or assistant, not {role!r}")
    return out


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_plain(block) for block in content]


def _anthropic_text(block: Mapping[str, Any]) -> str:
    if block.get("type") != "text":
        raise ValueError(f"content block of type {block.get('type')!r} is not supported")
    return str(block.get("text", ""))


def _anthropic_user(blocks: list[Mapping[str, Any]]) -> list[Message]:
    out: list[Message] = []
    texts: list[str] | None = None
    for block in blocks:
        if block.get("type") != "tool_result":
            texts = (texts or []) + [_anthropic_text(block)]
            continue
        if texts is not None:
            out.append(Message.user("".join(texts)))
            texts = None
        content = "".join(_anthropic_text(part) for part in _blocks(block.get("content")))
        metadata = {IS_ERROR: True} if block.get("is_error") else {}
        out.append(
            Message.tool(content, tool_call_id=block.get("tool_use_id", ""), metadata=metadata)
        )
    if texts is not None:
        out.append(Message.user("".join(texts)))
    return out


def _anthropic_assistant(blocks: list[Mapping[str, Any]]) -> Message:
    reply = _Reply()
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_use":
            reply.calls.append(
                ToolCall(
                    id=block.get("id", ""),
                    name=block.get("name", ""),
                    arguments=block.get("input") or {},
                )
            )
        elif kind in ("thinking", "redacted_thinking"):
            reply.kept.append(dict(block))
        else:
            reply.texts.append(_anthropic_text(block))
    return reply.message(ANTHROPIC_THINKING)
