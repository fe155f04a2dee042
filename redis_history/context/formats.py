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

Content parts (:mod:`redis_history.parts`) of user and tool messages travel in each
format's own shape; parsing keeps content that is all text as ``content`` and anything
else as ``parts``. A part a format cannot carry raises
:class:`~redis_history.errors.UnsupportedPartError` (an ``InvalidMessageError``) naming the
part, the format and the message, never dropped:

============================  ====================  ======================  ====================
part                          ``openai_chat``       ``openai_responses``    ``anthropic``
============================  ====================  ======================  ====================
text                          ``text``              ``input_text``          ``text``
image, inline                 ``image_url``         ``input_image``         ``image`` (base64;
                              (``data:`` URL)       (``data:`` URL)         JPEG/PNG/GIF/WebP)
image by URL                  ``image_url``         ``input_image``         ``image`` (url)
image by file id              raises                ``input_image``         ``image`` (file)
file, inline                  ``file``              ``input_file``          ``document`` (PDF:
                              (``file_data``)       (``file_data``)         base64; text/plain)
file by URL                   raises                ``input_file``          ``document`` (url,
                                                    (``file_url``)          PDF only)
file by file id               ``file``              ``input_file``          ``document`` (file)
audio (wav, mp3)              ``input_audio``       raises                  raises
in a tool result              text only             text, images, files     text, images, files
============================  ====================  ======================  ====================

An image's ``detail`` travels in both OpenAI formats (the Responses API requires one: none
is sent as ``"auto"``, and ``"auto"`` reads back as none); Anthropic has no field for it. A
file's name is chat's and Responses' ``filename``, Anthropic's document ``title``. A media
type given with a URL or a file id is not sent (the provider reads the file's). A file id
is the provider's own: only the API that issued it knows it.

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

import base64
import json
import mimetypes
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from redis_history.deprecation import moved
from redis_history.errors import InvalidMediaError, InvalidMessageError, UnsupportedPartError
from redis_history.models import MAX_NESTING, Message, ToolCall
from redis_history.parts import (
    ContentPart,
    FilePart,
    ImagePart,
    TextPart,
    data_url,
    decode_base64,
    from_data_url,
    inline,
    stand_in,
)
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
        UnsupportedPartError: a message holds a part ``format`` cannot carry (see the
            module's table); its ``index``, ``part`` and ``format`` say which.
        InvalidMediaError: a part's inline data contradicts its media type (a part built
            without validation; see :mod:`redis_history.parts`).
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
            than ``MAX_NESTING``, naming the call; a content part missing what it needs or
            holding what a part cannot (bad base64, an unknown ``detail``).
        ValueError: A content part no part type holds (a ``search_result`` block...), media
            in a system or assistant message, an unknown role or item type, or an unknown
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
    """Deprecated: ``render(await history.snapshot(), format, system_prompt)``, the rendering
    :func:`into_request` does on a sync history's snapshot."""
    moved("ainto_request", "render(await history.snapshot(), format, system_prompt)")
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


P = TypeVar("P", ImagePart, FilePart)


def _part(kind: type[P], format: WireFormat, **fields: Any) -> P:
    """A part built from what ``format`` gave, its problems an ``InvalidMessageError`` (an
    ``InvalidMediaError`` when its data's signature contradicts its media type)."""
    try:
        return kind(**fields)
    except ValidationError as exc:
        problems = "; ".join(error["msg"] for error in exc.errors())
        causes = [error.get("ctx", {}).get("error") for error in exc.errors()]
        media = next((cause for cause in causes if isinstance(cause, InvalidMediaError)), None)
        message = f"{kind.__name__} from {format}: {problems}"
        if media is not None:
            raise InvalidMediaError(message, media_type=media.media_type) from None
        raise InvalidMessageError(message) from None


def _content(parts: Sequence[ContentPart]) -> dict[str, Any]:
    """A parsed message's content: its text when every part is text, else its parts."""
    if all(isinstance(part, TextPart) for part in parts):
        return {"content": "".join(part.text for part in parts if isinstance(part, TextPart))}
    return {"parts": tuple(parts)}


def _text_only(parts: Sequence[ContentPart], what: str) -> str:
    """The text of ``parts``, which must all be text (an assistant's)."""
    for part in parts:
        if not isinstance(part, TextPart):
            raise InvalidMessageError(f"{what} holds text only, not {stand_in(part)}")
    return "".join(part.text for part in parts if isinstance(part, TextPart))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unsupported(part: ContentPart, format: WireFormat, why: str) -> UnsupportedPartError:
    return UnsupportedPartError(
        f"the {format} format cannot carry {stand_in(part)}: {why}", part=part.type, format=format
    )


@contextmanager
def _message_at(index: int, message: Message) -> Iterator[None]:
    """Name the message whose part a format cannot carry: its index and role."""
    try:
        yield
    except UnsupportedPartError as exc:
        raise UnsupportedPartError(
            f"message {index} ({message.role}): {exc.message}",
            part=exc.part,
            format=exc.format,
            index=index,
        ) from None


def _kept(message: Message, key: str) -> list[Any]:
    """The raw items kept under ``metadata[key]``, if they are a list."""
    value = message.metadata.get(key)
    return list(value) if isinstance(value, list) else []


# --- OpenAI chat completions -------------------------------------------------------------


def _render_openai_chat(messages: Sequence[Message], system_prompt: str | None) -> Request:
    out: list[dict[str, Any]] = []
    if system_prompt is not None:
        out.append({"role": "system", "content": system_prompt})
    for index, message in enumerate(messages):
        with _message_at(index, message):
            out.append(message.to_openai())
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
    for index, message in enumerate(messages):
        with _message_at(index, message):
            content = _responses_content(message)
        if message.role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": message.tool_call_id, "output": content}
            )
            continue
        if message.role == "assistant":
            items.extend(_kept(message, OPENAI_REASONING))
        if content or not message.tool_calls:
            items.append({"type": "message", "role": message.role, "content": content})
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
                parts, refusal = _responses_parts(item.get("content"))
                self.reply.texts.append(_text_only(parts, "an assistant message"))
                self.reply.refusal |= refusal
            elif kind == "function_call":
                self.reply.calls.append(_tool_call(item.get("call_id"), item))
            elif kind == "reasoning":
                self.reply.kept.append(item)
            elif kind == "message":
                self._flush()
                role = "system" if item.get("role") == "developer" else item.get("role")
                parts, _ = _responses_parts(item.get("content"))
                self.out.append(Message(role=role, **_content(parts)))
            elif kind == "function_call_output":
                self._flush()
                parts, _ = _responses_parts(item.get("output"))
                call_id = item.get("call_id", "")
                self.out.append(Message(role="tool", tool_call_id=call_id, **_content(parts)))
            else:
                raise ValueError(f"Responses item of type {kind!r} is not supported")
        self._flush()
        return self.out

    def _flush(self) -> None:
        if self.reply:
            self.out.append(self.reply.message(OPENAI_REASONING))
            self.reply = _Reply()


def _responses_content(message: Message) -> str | list[dict[str, Any]]:
    """A message's Responses ``content`` (or a tool result's ``output``): its text, or the list
    of its parts for a user or tool message that holds parts."""
    if message.parts and message.role in ("user", "tool"):
        return [to_responses_part(part) for part in message.parts]
    return message.text


def to_responses_part(part: ContentPart) -> dict[str, Any]:
    """``part`` as a Responses content part (of a ``message`` or a ``function_call_output``):
    ``input_text``, ``input_image`` (``image_url``: a URL or a ``data:`` URL; or ``file_id``)
    or ``input_file`` (``file_data`` as a ``data:`` URL, ``file_url`` or ``file_id``).

    ``detail`` is always sent (the SDK requires it), ``"auto"`` for an image without one.

    Raises:
        UnsupportedPartError: an audio part: the Responses API takes no audio input.
    """
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"type": "input_image", "detail": part.detail or "auto"}
        if part.file_id is not None:
            image["file_id"] = part.file_id
        else:
            image["image_url"] = part.url or data_url(*inline(part))
        return image
    if isinstance(part, FilePart):
        file: dict[str, Any] = {"type": "input_file"}
        if part.file_id is not None:
            file["file_id"] = part.file_id
        elif part.url is not None:
            file["file_url"] = part.url
        else:
            file["file_data"] = data_url(*inline(part))
        if part.filename is not None:
            file["filename"] = part.filename
        return file
    raise _unsupported(part, "openai_responses", "the Responses API takes no audio input")


def from_responses_part(part: Mapping[str, Any]) -> ContentPart:
    """A Responses content part as a part (the reverse of :func:`to_responses_part`; also
    ``output_text``). A ``detail`` of ``"auto"`` reads as none, the API's default.

    Raises:
        InvalidMessageError: a part missing what it needs, or with values a part cannot
            hold (bad base64, a ``file_data`` whose media type is unknown).
        ValueError: a part type the Responses API does not define for input.
    """
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return TextPart(text=str(part.get("text", "")))
    if kind == "input_image":
        detail = part.get("detail")
        return _part(
            ImagePart,
            "openai_responses",
            url=part.get("image_url"),
            file_id=part.get("file_id"),
            detail=None if detail == "auto" else detail,
        )
    if kind == "input_file":
        fields: dict[str, Any] = {
            "url": part.get("file_url"),
            "file_id": part.get("file_id"),
            "filename": part.get("filename"),
        }
        if (data := part.get("file_data")) is not None:
            if isinstance(data, str) and data[:5].lower() == "data:":
                fields["data"], fields["media_type"] = from_data_url(data)
            else:  # bare base64: the media type is the file name's
                fields["data"] = decode_base64(data, "input_file file_data")
                fields["media_type"] = mimetypes.guess_type(fields["filename"] or "")[0]
        return _part(FilePart, "openai_responses", **fields)
    raise ValueError(f"content part of type {kind!r} is not supported")


def _responses_parts(content: Any) -> tuple[list[ContentPart], bool]:
    """The parts of a Responses content list (or string), and whether it holds a refusal."""
    if content is None or isinstance(content, str):
        return ([TextPart(text=content)] if content else []), False
    parts: list[ContentPart] = []
    refusal = False
    for part in map(_plain, content):
        if part.get("type") == "refusal":
            parts.append(TextPart(text=str(part.get("refusal", ""))))
            refusal = True
        else:
            parts.append(from_responses_part(part))
    return parts, refusal


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

    for index, message in enumerate(messages):
        with _message_at(index, message):
            parts = [to_anthropic_part(part) for part in message.parts]
        if message.role == "system":
            system.append(message.text)
        elif message.role == "user":
            add("user", parts or [{"type": "text", "text": message.content}])
        elif message.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": parts or message.content,
            }
            if message.metadata.get(IS_ERROR) is True:
                block["is_error"] = True
            add("user", [block])
        else:
            blocks = _kept(message, ANTHROPIC_THINKING)
            if message.text or not message.tool_calls:
                blocks.append({"type": "text", "text": message.text})
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
    parts: list[ContentPart] | None = None
    for block in blocks:
        if block.get("type") != "tool_result":
            parts = parts or []
            parts.append(from_anthropic_part(block))
            continue
        if parts is not None:
            out.append(Message(role="user", **_content(parts)))
            parts = None
        content = [from_anthropic_part(part) for part in _blocks(block.get("content"))]
        metadata = {IS_ERROR: True} if block.get("is_error") else {}
        call_id = block.get("tool_use_id", "")
        out.append(
            Message(role="tool", tool_call_id=call_id, metadata=metadata, **_content(content))
        )
    if parts is not None:
        out.append(Message(role="user", **_content(parts)))
    return out


ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The media types of the images Anthropic takes inline."""


def to_anthropic_part(part: ContentPart) -> dict[str, Any]:
    """``part`` as an Anthropic content block: ``text``; ``image`` with a ``base64``, ``url`` or
    ``file`` source; ``document`` with a ``base64`` (PDF), ``text`` (plain text), ``url`` or
    ``file`` source, its ``title`` the file's name. An image's ``detail`` has no field here.

    Raises:
        UnsupportedPartError: audio (Anthropic takes none); an inline image that is not JPEG,
            PNG, GIF or WebP; an inline file that is not a PDF or UTF-8 plain text; a file by
            URL whose media type is not PDF.
    """
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        if part.file_id is not None:
            source: dict[str, Any] = {"type": "file", "file_id": part.file_id}
        elif part.url is not None:
            source = {"type": "url", "url": part.url}
        else:
            data, media_type = inline(part)
            if media_type not in ANTHROPIC_IMAGE_TYPES:
                raise _unsupported(part, "anthropic", "its images are JPEG, PNG, GIF or WebP")
            source = {"type": "base64", "media_type": media_type, "data": _b64(data)}
        return {"type": "image", "source": source}
    if isinstance(part, FilePart):
        if part.file_id is not None:
            source = {"type": "file", "file_id": part.file_id}
        elif part.url is not None:
            if part.media_type not in (None, "application/pdf"):
                raise _unsupported(part, "anthropic", "a document given by URL is a PDF")
            source = {"type": "url", "url": part.url}
        else:
            source = _anthropic_inline_document(part)
        block: dict[str, Any] = {"type": "document", "source": source}
        if part.filename is not None:
            block["title"] = part.filename
        return block
    raise _unsupported(part, "anthropic", "Anthropic Messages takes no audio input")


def _anthropic_inline_document(part: FilePart) -> dict[str, Any]:
    data, media_type = inline(part)
    if media_type == "application/pdf":
        return {"type": "base64", "media_type": media_type, "data": _b64(data)}
    if media_type == "text/plain":
        try:
            return {"type": "text", "media_type": media_type, "data": data.decode()}
        except UnicodeDecodeError:
            raise _unsupported(part, "anthropic", "a plain-text document is UTF-8") from None
    raise _unsupported(part, "anthropic", "its documents are PDF or plain text")


def from_anthropic_part(block: Mapping[str, Any]) -> ContentPart:
    """An Anthropic content block as a part (the reverse of :func:`to_anthropic_part`).

    Raises:
        InvalidMessageError: a source missing what it needs, or bad base64.
        ValueError: a block or source type a part cannot hold (``search_result``, a
            ``content`` document).
    """
    kind = block.get("type")
    if kind == "text":
        return TextPart(text=str(block.get("text", "")))
    if kind not in ("image", "document"):
        raise ValueError(f"content block of type {kind!r} is not supported")
    source = _plain(block.get("source")) or {}
    origin = source.get("type")
    if origin == "base64":
        data = decode_base64(source.get("data"), f"an Anthropic {kind}'s data")
        fields: dict[str, Any] = {"data": data, "media_type": source.get("media_type")}
    elif origin == "url":
        fields = {"url": source.get("url")}
    elif origin == "file":
        fields = {"file_id": source.get("file_id")}
    elif origin == "text" and kind == "document" and isinstance(source.get("data"), str):
        try:
            fields = {"data": source["data"].encode(), "media_type": "text/plain"}
        except UnicodeEncodeError:
            raise InvalidMessageError("an Anthropic document holds a lone surrogate") from None
    else:
        raise ValueError(f"an Anthropic {kind} with a source of type {origin!r} is not supported")
    if kind == "image":
        return _part(ImagePart, "anthropic", **fields)
    return _part(FilePart, "anthropic", filename=block.get("title"), **fields)


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
