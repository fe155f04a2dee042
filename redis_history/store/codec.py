"""The stored form of a message (the envelope) and the script arguments built from it.

An envelope is the message JSON wrapped with its token count, one line of JSON
that ``redis-cli`` shows as it is::

    {"t":5,"m":{"id":"NeoQJZeSr_87gETaFrdzZw","role":"user","content":"hi","at":1795439894017}}
    {"t":9,"x":1,"s":1,"m":{"id":...,"role":"system","content":"Summary: ...","at":...}}

``t`` is the token count; ``x`` is 1 when it came from an exact tokenizer and
``s`` is 1 for a summary written by ``splice_prefix``, each left out when 0. The
message leaves out every field at its default (``content`` ``""``,
``tool_calls`` ``[]``, ``tool_call_id`` and ``name`` ``null``, ``metadata``
and a call's ``arguments`` ``{}``) and stores ``created_at`` as ``at``, integer
milliseconds since the epoch when that is exact (UTC, whole milliseconds, as
every default ``created_at`` is), else as an ISO string; messages stored before
with ``created_at`` read as they did. See ``redis_history.store._stored``.

``t`` comes first and the message's ``id`` first in ``m``, so that the Lua
scripts read them with anchored patterns instead of decoding a message that
may be a megabyte long (``lua/includes/envelopes.lua``, ``ids.lua``). A write
sends the envelopes with one role item per message, so the scripts check role
order and tool pairing without decoding JSON either.

A message with text and nothing else whose text is :data:`COMPRESS_BYTES` (2 KiB) of
UTF-8 or more is kept compressed (zstd, level 1): its envelope is the JSON of the
message without its ``content``, a ``z`` (the compressed text's length) between the
flags and ``m``, then the compressed text and a NUL byte::

    {"t":4051,"z":3388,"m":{"id":"...","role":"tool","tool_call_id":"call_1","at":...}}
    <3,388 bytes of zstd>\0          (on the same line)

The scripts read ``t``, the id, the role and the ``tool_call_id`` with the same patterns
(``z`` is one more flag to them). No JSON text ends with a NUL, so the last byte tells a
reader which form an envelope has: :func:`_unpacked` is the one place that takes a
compressed one apart, and every read (snapshots, entries, chat-completions dicts, and so
``show``, ``export`` and ``transcript``) puts the text back as it was written. Envelopes
written before, and short texts, are plain JSON and read as they always did.

The limits on what one write sends and one transcript page returns count an envelope's
:func:`read_size`, the bytes a reader gets back: a compressed one counts its text's length
as its frame's header gives it (nothing is decompressed), so 8 MiB of envelopes never carry
a gigabyte of text that compressed to them.

Reads validate each envelope on its own (joining a list of megabytes into one
document cost more than the per-call overhead saves) and inside pydantic-core,
the role rules included: :func:`decode_messages` for ``snapshot``,
:func:`decode_entries` with the token counts, and :func:`decode_openai`, which
validates into dicts of the stored fields and renders chat-completions
messages from them without building models. Reads leave the process's garbage
collector to the process (what its collections cost a long read, and what a
process can do about it: ``docs/benchmarks.md``, ``bench_gc.py``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import orjson
import zstandard
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticSerializationError, to_json

from redis_history.errors import (
    CorruptHistoryError,
    InvalidMediaError,
    InvalidMessageError,
    LimitExceededError,
    MessageTooLargeError,
)
from redis_history.limits import MAX_MESSAGE_BYTES, MAX_TOOL_CALLS
from redis_history.media import media_type_of
from redis_history.models import (
    JSON_SCALARS,
    MAX_ID_LENGTH,
    MAX_NESTING,
    Message,
    ToolCall,
    chat_message,
)
from redis_history.parts import PART_TYPES, mislabeled
from redis_history.store import blobs
from redis_history.store._stored import (
    ROLES,
    arguments_serializer,
    envelope_schema,
    stamp,
    stored_serializer,
    stored_validator,
)
from redis_history.tokens import Pricer, TokenCounter

__all__ = [
    "COMPRESS_BYTES",
    "ENVELOPE_NESTING",
    "Batch",
    "Entry",
    "decode_entries",
    "decode_messages",
    "decode_openai",
    "encode_batch",
    "encode_entry",
    "encode_message",
    "read_size",
    "role_item",
]

ENVELOPE_NESTING = 5
"""At most the levels a read adds above a tool call's ``arguments`` (one fewer above
``metadata``): the envelope, the message, ``tool_calls``, the call, and one spare (reads
once parsed a whole list at once; each envelope is now parsed alone).
``MAX_NESTING`` + this stays well under the JSON parser's limit."""


class Entry(BaseModel):
    """A stored message with what the store knows about it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    tokens: int = Field(alias="t", ge=0)
    """Token count computed once, at write time."""
    exact: bool = Field(alias="x", default=False)
    """Whether ``tokens`` came from an exact tokenizer rather than a heuristic."""
    summary: bool = Field(alias="s", default=False)
    """Whether this message was written by ``splice_prefix`` in place of originals."""
    message: Message = Field(alias="m")
    """The message itself."""


_STORED = stored_serializer()


def encode_message(
    message: Message,
    counter: TokenCounter | Pricer,
    max_bytes: int,
    *,
    summary: bool = False,
    index: int = 0,
) -> tuple[bytes, int]:
    """One message's envelope and token count, refusing what would not read back as written.

    Construction refused what is not JSON data (see ``redis_history.models``);
    this refuses what only the stored form shows: the serializer raises on a lone
    surrogate anywhere, and on objects it cannot write. The nesting, which only
    Python input had checked (not ``model_validate_json``, ``model_construct`` or
    a ``metadata`` changed afterwards), is checked again cheaply: only when
    ``metadata`` or some ``arguments`` holds an object or an array are the
    brackets of the output counted (fewer than :data:`MAX_NESTING` cannot nest
    deeper), and only past that count, or when the serializer raised, is the
    message walked, to name the field.

    Args:
        message: the message to store.
        counter: prices the message (a history passes its own :class:`Pricer`).
        max_bytes: the largest envelope allowed.
        summary: mark the envelope as written by ``splice_prefix``.
        index: the message's place in its batch, for error messages.

    Returns:
        The envelope and the token count.

    Raises:
        TypeError: ``message`` is not a ``Message``.
        InvalidMessageError: a lone surrogate in any string; nesting deeper than
            ``MAX_NESTING``; an object the serializer, or the pricing's ``json.dumps`` of
            a call's arguments, cannot write (possible only if validation was skipped).
        MessageTooLargeError: the envelope is longer than ``max_bytes``.
    """
    if not isinstance(message, Message):
        raise TypeError(f"expected a Message at index {index}, got {type(message).__name__}")
    price = counter if isinstance(counter, Pricer) else Pricer(counter)
    try:
        tokens = price(message)
    except TypeError as exc:
        if not message.tool_calls:
            raise
        # a call's arguments holding what json.dumps cannot write (only model_construct)
        problem = _problem(message) or f"its tool calls cannot be priced: {exc}"
        raise _unstorable(message, index, problem) from None
    envelope = _encoded(
        message, tokens, exact=price.exact, summary=summary, max_bytes=max_bytes, index=index
    )
    return envelope, tokens


def encode_entry(entry: Entry, max_bytes: int, *, index: int = 0, inline: bool = False) -> bytes:
    """The envelope of a stored entry, its token count and flags kept (an import writes
    what an export read: the tokens were priced when the message was first written).
    ``inline`` keeps all of its parts' data in it (an export's line), where the store keeps
    large data outside the list (:mod:`redis_history.store.blobs`).

    Raises:
        InvalidMessageError: what :func:`encode_message` refuses.
        MessageTooLargeError: the envelope is longer than ``max_bytes``.
    """
    return _encoded(
        entry.message,
        entry.tokens,
        exact=entry.exact,
        summary=entry.summary,
        max_bytes=max_bytes,
        index=index,
        inline=inline,
    )


def _encoded(
    message: Message,
    tokens: int,
    *,
    exact: bool,
    summary: bool,
    max_bytes: int,
    index: int,
    inline: bool = False,
) -> bytes:
    """The stored envelope of ``message``: compressed when its text is long enough and
    ``inline`` is not asked (an export's line is JSON), else JSON. ``max_bytes`` bounds
    the JSON form either way, so a message is refused or taken whatever its stored form.

    Raises:
        InvalidMessageError: see :func:`encode_message`.
        MessageTooLargeError: the JSON envelope is longer than ``max_bytes``.
    """
    if not inline and (packed := _packed(message, tokens, exact, summary, max_bytes)):
        return packed
    body = _plain_body(message)
    names = b""
    if body is None and (body := _calls_body(message)) is None:
        body, names = _general_body(message, index, inline=inline)
    if names:
        envelope = _NAMED_HEADS[exact, summary] % (tokens, names, body)
    else:
        envelope = _HEADS[exact, summary] % (tokens, body)
    if len(envelope) > max_bytes:
        raise MessageTooLargeError(
            f"message {message.id} is {len(envelope)} bytes stored; the limit is {max_bytes}",
            index=index,
        )
    return envelope


def _general_body(message: Message, index: int, *, inline: bool = False) -> tuple[bytes, bytes]:
    """The stored JSON of a message that is not plain (tool calls, metadata, a name, or
    fields a validated message would not hold), and the digests of the pieces of inline
    data it keeps outside the list (:mod:`redis_history.store.blobs`), which its envelope's
    head names. A message built without validation (``model_construct``, ``model_copy``)
    whose fields a read would refuse is refused here, not stored to fail every later read;
    so is a part whose media type its data's signature contradicts."""
    if problem := _shape_problem(message):
        raise _unstorable(message, index, f"it would not read back: {problem}")
    fields, swaps, names = message.__dict__, None, b""
    if fields.get("parts"):
        for part in fields["parts"]:
            if (wrong := mislabeled(part)) is not None:
                raise InvalidMediaError(
                    f"message {message.id} at index {index}: {wrong}",
                    media_type=media_type_of(part.data),
                    index=index,
                )
        if not inline and (kept_out := blobs.outside(message)) is not None:
            fields, swaps, names = kept_out
    try:
        body = _STORED.to_json(fields, exclude_defaults=True, by_alias=True)
    except PydanticSerializationError as exc:
        raise _unstorable(message, index, _problem(message) or str(exc)) from exc
    for marker, reference in swaps or ():
        body = body.replace(marker, reference)
    if (  # nests only here: a plain message holds no metadata or tool calls
        _may_nest(message)
        and body.count(b"{") + body.count(b"[") > MAX_NESTING
        and (problem := _problem(message))
    ):
        raise _unstorable(message, index, problem)
    return body, names


def _shape_problem(message: Message) -> str | None:
    """What a read checks of a message's fields that only ``model_construct`` can get past
    (validation refuses all of it when a message is built): the types and lengths of its
    ids, its role, which role carries tool calls or a call id; ``None`` if nothing."""
    fields = message.__dict__
    role, calls, answers = fields["role"], fields["tool_calls"], fields["tool_call_id"]
    if not _an_id(fields["id"]):
        return f"id must be a string of 1 to {MAX_ID_LENGTH} characters"
    if role not in ROLES:
        return f"role {role!r} is not a role"
    if type(fields["content"]) is not str:
        return "content is not a string"
    if not isinstance(calls, tuple | list) or (calls and role != "assistant"):
        return "only an assistant carries tool_calls, as a list"
    for i, call in enumerate(calls):
        if not (
            isinstance(call, ToolCall)
            and _an_id(call.id)
            and type(call.name) is str
            and call.name
            and isinstance(call.arguments, dict)
        ):
            return f"tool_calls[{i}] is not a call with an id, a name and arguments"
    if (role == "tool") is not (type(answers) is str and bool(answers)) or (
        role != "tool" and answers is not None
    ):
        return "a tool result, and only one, carries a tool_call_id"
    if not (fields["name"] is None or type(fields["name"]) is str):
        return "name is not a string"
    parts = fields.get("parts", ())
    if not isinstance(parts, tuple | list) or not all(isinstance(p, PART_TYPES) for p in parts):
        return "parts is not a list of content parts"
    if parts and fields["content"]:
        return "a message holds content or parts, not both"
    if not isinstance(fields["metadata"], dict) or not isinstance(fields["created_at"], datetime):
        return "metadata is not an object, or created_at not a datetime"
    return None


def _an_id(value: object) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_ID_LENGTH


_HEADS = {
    (False, False): b'{"t":%d,"m":%s}',
    (True, False): b'{"t":%d,"x":1,"m":%s}',
    (False, True): b'{"t":%d,"s":1,"m":%s}',
    (True, True): b'{"t":%d,"x":1,"s":1,"m":%s}',
}
"""The envelope's head by (exact, summary): ``x`` and ``s`` are left out when 0."""

COMPRESS_BYTES = 2048
"""A message with text and nothing else keeps its text compressed when that is this many
UTF-8 bytes or more (and compression saves an eighth of it). Read on every write, so a
benchmark can move it; what it was for a message stored before does not matter to reads."""

_LEVEL = 1
"""zstd's level: on tool results, level 3 kept 3% fewer bytes for a quarter more CPU, and
levels below 1 were no faster and kept 20-40% more (docs/benchmarks.md)."""

_NAMED_HEADS = {
    (False, False): b'{"t":%d,"b":"%s","m":%s}',
    (True, False): b'{"t":%d,"x":1,"b":"%s","m":%s}',
    (False, True): b'{"t":%d,"s":1,"b":"%s","m":%s}',
    (True, True): b'{"t":%d,"x":1,"s":1,"b":"%s","m":%s}',
}
"""The head of a message that keeps inline data outside the list: ``b`` names the pieces
(their digests, 32 hex digits each), so the scripts count them without decoding it."""

_PACKED_HEADS = {
    (False, False): b'{"t":%d,"z":%d,"m":%s}',
    (True, False): b'{"t":%d,"x":1,"z":%d,"m":%s}',
    (False, True): b'{"t":%d,"s":1,"z":%d,"m":%s}',
    (True, True): b'{"t":%d,"x":1,"s":1,"z":%d,"m":%s}',
}
"""A compressed envelope's head by (exact, summary); the compressed text and a NUL follow."""

_PACKED = re.compile(rb'\{"t":\d+,(?:"[xs]":1,)*"z":(\d+),"m":\{')
"""A compressed envelope's head up to its message, the compressed length captured. The
flags may come in any order before ``z`` (``replace-4.lua`` puts ``"s":1`` first)."""

_CONTENT = len(b',"content":')
_ENVELOPE_HEAD = 64
"""More than a JSON envelope holds besides its body: the head, the flags, the count."""


class _Codecs(threading.local):
    """A zstd compressor and decompressor for each thread: neither may be used by two
    threads at once, and making one per call costs more than compressing 2 KiB."""

    def __init__(self) -> None:
        self.compress = zstandard.ZstdCompressor(level=_LEVEL).compress
        self.decompress = zstandard.ZstdDecompressor().decompress


_CODECS = _Codecs()


def _packed(
    message: Message, tokens: int, exact: bool, summary: bool, max_bytes: int
) -> bytes | None:
    """The compressed envelope of ``message``, or ``None`` for a JSON one: a message not
    plain (:func:`_plain_body`), a text under :data:`COMPRESS_BYTES` or that compression
    hardly shrinks, and whatever the JSON path names or refuses (a lone surrogate, a JSON
    envelope over ``max_bytes``)."""
    content = message.__dict__["content"]
    if type(content) is not str or len(content) * 4 < COMPRESS_BYTES:  # fewer bytes
        return None
    try:
        text = content.encode()
    except UnicodeEncodeError:
        return None
    if len(text) < COMPRESS_BYTES:
        return None
    head = _plain_body(message, text_kept=False)
    if head is None:
        return None
    if len(head) + _ENVELOPE_HEAD + 6 * len(text) > max_bytes:  # escaped, it may be over
        json_bytes = len(_HEADS[exact, summary] % (tokens, head)) + _CONTENT + len(_dumps(content))
        if json_bytes > max_bytes:
            return None
    frame = _CODECS.compress(text)
    if len(frame) > len(text) - len(text) // 8:
        return None
    return b"".join((_PACKED_HEADS[exact, summary] % (tokens, len(frame), head), frame, b"\0"))


def _unpacked(item: bytes | str) -> tuple[bytes, str]:
    """A compressed envelope as the JSON envelope of its message without the text, and the
    text. The one place that decompresses the compressed form.

    Raises:
        ValueError: ``item`` is not a whole compressed envelope.
    """
    head, frame, _size = _frame(item)
    try:
        return head, _CODECS.decompress(frame).decode()
    except zstandard.ZstdError as exc:
        raise ValueError(
            f"a stored envelope's compressed text does not decompress: {exc}"
        ) from None


def _frame(item: bytes | str) -> tuple[bytes, memoryview, int]:
    """A compressed envelope's JSON without the text, its compressed text, and that text's
    length decompressed as the frame's header gives it (nothing is decompressed).

    Raises:
        ValueError: ``item`` is not a whole compressed envelope, or its text would
            decompress to more than ``MAX_MESSAGE_BYTES`` or to a length unknown.
    """
    if not isinstance(item, bytes) or (found := _PACKED.match(item)) is None:
        raise ValueError("a stored envelope ends with a NUL but has no compressed text")
    end = len(item) - 1 - int(found[1])
    frame = memoryview(item)[end:-1]
    try:
        size = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise ValueError(
            f"a stored envelope's compressed text does not decompress: {exc}"
        ) from None
    if end <= found.end() or not 0 <= size <= MAX_MESSAGE_BYTES:
        raise ValueError("a stored envelope's compressed text is cut short or too long")
    return item[:end], frame, size


def read_size(envelope: bytes) -> int:
    """The bytes a reader gets back of a stored envelope, what the limits on writes and
    pages count: a JSON envelope's length; a compressed one's without its compressed text
    and NUL, plus that text's length (the frame's header, read, not decompressed). One that
    :func:`_unpacked` refuses counts ``MAX_MESSAGE_BYTES`` more than its length, more than
    any message reads back: it ends a page, and decoding it names it corrupt."""
    if envelope[-1:] != b"\0":
        return len(envelope)
    try:
        head, _compressed, size = _frame(envelope)
    except ValueError:
        return len(envelope) + MAX_MESSAGE_BYTES
    return len(head) + size


_SURROGATE = re.compile("[\ud800-\udfff]")

_PLAIN = {
    (role, content, answers): b"".join(
        (
            b'{"id":%s,"role":"' + role.encode() + b'"',
            b',"content":%s' if content else b"",
            b',"tool_call_id":%s' if answers else b"",
            b',"at":%d}',
        )
    )
    for role in ROLES
    for content in (False, True)
    for answers in (False, True)
}
"""The stored JSON of a plain message, by (role, content not empty, tool_call_id set)."""


def _plain_body(message: Message, *, text_kept: bool = True) -> bytes | None:
    """What the stored serializer writes for ``message``, written faster, or ``None``;
    without its ``content`` when not ``text_kept`` (a compressed envelope's head).

    Most messages hold text and nothing else: no tool calls, name or metadata, and a
    timestamp stored as milliseconds. Their JSON is a template with the strings
    encoded by orjson (what pydantic-core writes, byte for byte, at twice its speed
    on long texts; a test holds the two equal). Anything else, and any string
    orjson refuses (a lone surrogate), is left to the serializer, which names it.
    """
    fields = message.__dict__
    if fields["tool_calls"] or (stamped := _template_stamp(message)) is None:
        return None
    content, answers, role = fields["content"], fields["tool_call_id"], fields["role"]
    if (
        (role == "tool") is not (type(answers) is str and bool(answers))
        or (role != "tool" and answers is not None)
        or role not in ROLES
    ):
        return None
    text = text_kept and content
    try:
        values: list[bytes | int] = [_dumps(fields["id"])]
        if text:
            values.append(_dumps(text))
        if answers is not None:
            values.append(_dumps(answers))
    except orjson.JSONEncodeError:
        return None
    values.append(stamped)
    return _PLAIN[fields["role"], bool(text), answers is not None] % tuple(values)


_dumps = orjson.dumps


def _template_stamp(message: Message) -> int | None:
    """The stored timestamp of a message the templates may write (:func:`_plain_body`,
    :func:`_calls_body`), or ``None``: a ``Message`` itself (a subclass may store more)
    with no name, metadata or parts, text as its content and a valid id (only
    ``model_construct`` lets another type in), and a timestamp stored as milliseconds."""
    fields = message.__dict__
    if (
        type(message) is not Message
        or fields["metadata"]
        or fields["name"] is not None
        or fields.get("parts")
        or type(fields["content"]) is not str
        or not _an_id(fields["id"])
        or not isinstance(moment := fields["created_at"], datetime)
    ):
        return None
    stamped = stamp(moment)
    return stamped if isinstance(stamped, int) else None


_CALLS = {
    content: b'{"id":%s,"role":"assistant"'
    + (b',"content":%s' if content else b"")
    + b',"tool_calls":[%s],"at":%d}'
    for content in (False, True)
}
"""The stored JSON of an assistant's tool calls with at most text, by content not empty."""
_CALL = b'{"id":%s,"name":%s}'
_CALL_WITH_ARGUMENTS = b'{"id":%s,"name":%s,"arguments":%s}'
_ARGUMENTS = arguments_serializer()


def _calls_body(message: Message) -> bytes | None:
    """What the stored serializer writes for an assistant's tool calls with at most text
    (no name, metadata or parts), written faster, or ``None``: a template as
    :func:`_plain_body`'s, each call's ``arguments`` written by the serializer's own schema
    for them (which refuses what is not JSON, and writes NaN as it does). Anything else, a
    refusal or arguments that may nest too deep, is left to :func:`_general_body`, which
    names what it refuses. A test holds the two equal."""
    fields = message.__dict__
    calls, content = fields["tool_calls"], fields["content"]
    if (
        fields["role"] != "assistant"
        or type(calls) is not tuple
        or not calls
        or fields["tool_call_id"] is not None
        or (stamped := _template_stamp(message)) is None
    ):
        return None
    written, nested = [], False
    try:
        for call in calls:
            if type(call) is not ToolCall:
                return None
            call_id, name, arguments = call.id, call.name, call.arguments
            if not (_an_id(call_id) and type(name) is str and name and type(arguments) is dict):
                return None
            if not arguments:
                written.append(_CALL % (_dumps(call_id), _dumps(name)))
                continue
            nested = nested or not JSON_SCALARS.issuperset(map(type, arguments.values()))
            given = _ARGUMENTS.to_json(arguments)
            written.append(_CALL_WITH_ARGUMENTS % (_dumps(call_id), _dumps(name), given))
        values = [_dumps(fields["id"])]
        if content:
            values.append(_dumps(content))
    except (orjson.JSONEncodeError, PydanticSerializationError):
        return None
    body = b",".join(written)
    if nested and body.count(b"{") + body.count(b"[") > MAX_NESTING:
        return None
    return _CALLS[bool(content)] % (*values, body, stamped)


def _may_nest(message: Message) -> bool:
    """Whether ``metadata`` or any call's ``arguments`` holds something other than scalars
    (or is not a dict at all, which only ``model_construct`` lets in)."""
    for values in (message.metadata, *(getattr(c, "arguments", None) for c in message.tool_calls)):
        if values and not (
            isinstance(values, dict) and JSON_SCALARS.issuperset(map(type, values.values()))
        ):
            return True
    return False


def _unstorable(message: Message, index: int, problem: str) -> InvalidMessageError:
    return InvalidMessageError(
        f"message {message.id!r} at index {index} cannot be stored: {problem}", index=index
    )


def _problem(message: Message) -> str | None:
    """Where and why the write refuses ``message``, or ``None`` (the slow path: a walk)."""
    for field in ("id", "content", "name", "tool_call_id"):
        if problem := _text_problem(getattr(message, field), field):
            return problem
    for i, part in enumerate(message.parts):
        for field in ("text", "url", "file_id", "filename", "media_type"):
            where = f"parts[{i}].{field}"
            if problem := _text_problem(getattr(part, field, None), where):
                return problem
    for i, call in enumerate(message.tool_calls):
        where = f"tool_calls[{i}]"
        if not isinstance(call, ToolCall):
            return f"{where} is {type(call).__name__}, not a ToolCall"
        for field in ("id", "name"):
            if problem := _text_problem(getattr(call, field), f"{where}.{field}"):
                return problem
        if problem := _json_problem(call.arguments, f"{where}.arguments"):
            return problem
    return _json_problem(message.metadata, "metadata")


def _text_problem(value: object, where: str) -> str | None:
    if value is None or (isinstance(value, str) and value.isascii()):
        return None
    if not isinstance(value, str):
        return _scalar_problem(value, where)
    if found := _SURROGATE.search(value):
        return (
            f"{where} holds a lone surrogate U+{ord(found.group()):04X} at position "
            f"{found.start()}, which UTF-8 cannot encode"
        )
    return None


def _json_problem(root: object, where: str) -> str | None:
    """The first value under ``root`` that cannot be written, or where it nests too deep."""
    if not isinstance(root, dict | list):
        return _scalar_problem(root, where)
    stack: list[tuple[Any, int, str]] = [(root, 1, where)]
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_NESTING:
            return f"{where} nests deeper than MAX_NESTING = {MAX_NESTING} levels"
        if isinstance(node, dict):
            for key in node:
                if problem := _text_problem(key, f"{path} key {key!r}"):
                    return problem
        items: Iterable[tuple[object, object]] = (
            node.items() if isinstance(node, dict) else enumerate(node)
        )
        for key, value in items:
            if isinstance(value, dict | list):
                stack.append((value, depth + 1, f"{path}[{key!r}]"))
            elif problem := _scalar_problem(value, f"{path}[{key!r}]"):
                return problem
    return None


def _scalar_problem(value: object, where: str) -> str | None:
    if isinstance(value, str):
        return _text_problem(value, where)
    if value is None or isinstance(value, int | float):
        return None
    try:  # written as pydantic writes it (a set as a list), unless it cannot be
        to_json(value)
    except PydanticSerializationError:
        return f"{where} is {type(value).__name__}, which cannot be written as JSON"
    return None


def role_item(message: Message) -> tuple[str | int, ...]:
    """What the scripts check role order and pairing on (``walk`` in
    ``lua/includes/walk.lua``): the role; a tool result adds the call id it
    answers; an assistant adds the number of its tool calls and their ids."""
    role = message.role
    if role == "tool":
        return role, message.tool_call_id or ""
    if role == "assistant":
        calls = message.tool_calls
        if not calls:
            return role, 0
        ids = [call.id for call in calls]
        if len(ids) > MAX_TOOL_CALLS:
            raise LimitExceededError(
                f"message {message.id} requests {len(ids):,} tool calls; the limit is "
                f"{MAX_TOOL_CALLS:,}",
                limit="tool calls per message",
                maximum=MAX_TOOL_CALLS,
            )
        if len(set(ids)) != len(ids):
            raise InvalidMessageError(f"message {message.id} repeats a tool call id")
        return role, len(ids), *ids
    return (role,)


class Batch(NamedTuple):
    """Messages encoded for a write script (``read_batch`` in ``lua/includes/batch.lua``)."""

    tokens: int
    """The sum of their token counts."""
    envelopes: list[bytes]
    """One envelope per message."""
    roles: list[str | int]
    """The role items, one after another (``role_item``)."""
    read_bytes: int
    """What a reader gets back of the envelopes (:func:`read_size`), which the limit on one
    write counts: compressed, they may be far fewer bytes."""

    def args(self, head: tuple[Any, ...]) -> tuple[Any, ...]:
        """The script's arguments: ``head``, then the token sum, the count, the envelopes
        and the role items."""
        return *head, self.tokens, len(self.envelopes), *self.envelopes, *self.roles


def encode_batch(
    messages: Sequence[Message],
    counter: TokenCounter | Pricer,
    max_bytes: int,
    *,
    summary: bool = False,
) -> Batch:
    """``messages`` encoded (see :func:`encode_message`, which raises for each)."""
    counter = counter if isinstance(counter, Pricer) else Pricer(counter)
    envelopes: list[bytes] = []
    roles: list[str | int] = []
    total = read = 0
    for index, message in enumerate(messages):
        envelope, tokens = encode_message(message, counter, max_bytes, summary=summary, index=index)
        envelopes.append(envelope)
        roles += role_item(message)
        total += tokens
        read += read_size(envelope)
    return Batch(total, envelopes, roles, read)


_ENVELOPE = stored_validator(envelope_schema)
_FIELDS = stored_validator(envelope_schema, models=False)


# Every read below takes an envelope whose last byte is not 0 (``}``, or a ``str`` from a
# client decoding replies) as JSON and validates it whole; one ending with a NUL is
# compressed, read by :func:`_unpacked`, and its text put back into what validates.


def _with_text(message: Message, text: str) -> None:
    """Put ``text`` in ``message``, just validated from its envelope's head (so no one else
    holds it), as validating its JSON with the text in it would have: the model is frozen,
    so in its ``__dict__``, without the copy ``model_copy`` makes."""
    message.__dict__["content"] = text
    message.__pydantic_fields_set__.add("content")


def _read_envelope(item: bytes | str) -> dict[str, Any]:
    head, text = _unpacked(item)
    envelope: dict[str, Any] = _ENVELOPE.validate_json(head)
    _with_text(envelope["m"], text)
    return envelope


def _read_fields(item: bytes | str) -> dict[str, Any]:
    head, text = _unpacked(item)
    envelope: dict[str, Any] = _FIELDS.validate_json(head)
    envelope["m"]["content"] = text
    return envelope


_UNREADABLE = (ValueError, IndexError)
"""What reading an envelope raises when it is not one: ``ValidationError`` and what
:func:`_unpacked` raises are ``ValueError``s; an empty one has no last byte."""


def decode_messages(
    raw: Sequence[bytes | str], *, where: str = "", summaries: bool = True
) -> list[Message]:
    """The messages of stored envelopes (without those ``splice_prefix`` wrote, when not
    ``summaries``); raises ``CorruptHistoryError``."""
    one, packed = _ENVELOPE.validate_json, _read_envelope
    try:
        if summaries:
            return [one(item)["m"] if item[-1] else packed(item)["m"] for item in raw]
        read = (one(item) if item[-1] else packed(item) for item in raw)
        return [e["m"] for e in read if not e.get("s")]
    except _UNREADABLE as exc:
        raise _corrupt(raw, where) from exc


def decode_entries(raw: Sequence[bytes | str], *, where: str = "") -> list[Entry]:
    """Stored envelopes as entries (message, token count, flags); raises ``CorruptHistoryError``."""
    one, packed = _ENVELOPE.validate_json, _read_envelope
    try:
        return [_entry(one(item) if item[-1] else packed(item)) for item in raw]
    except _UNREADABLE as exc:
        raise _corrupt(raw, where) from exc


def _entry(envelope: dict[str, Any]) -> Entry:
    """An envelope read by :data:`_ENVELOPE` as an :class:`Entry`: its keys are ``Entry``'s
    aliases, and its message, a ``Message`` already, is taken as it is. (An ``Entry``
    schema holding the stored message's would not do: pydantic-core uses a model class's
    own validator for a model schema of that class.)"""
    entry: Entry = _ENTRY_OF(envelope)
    return entry


_ENTRY_OF = Entry.__pydantic_validator__.validate_python


def decode_openai(raw: Sequence[bytes | str], *, where: str = "") -> list[dict[str, Any]]:
    """The chat-completions messages of stored envelopes, equal to ``Message.to_openai()``
    of each; validated as ``decode_messages`` validates, but into dicts of the stored
    fields instead of models. Raises ``CorruptHistoryError``."""
    one, packed = _FIELDS.validate_json, _read_fields
    try:
        return [_wire((one(item) if item[-1] else packed(item))["m"]) for item in raw]
    except _UNREADABLE as exc:
        raise _corrupt(raw, where) from exc


def _wire(m: dict[str, Any]) -> dict[str, Any]:
    """``Message.to_openai`` of a message's stored fields (:func:`chat_message`)."""
    if len(m) == 4 and "created_at" in m and "id" in m:  # id, role, content, stamp (stored as at)
        return {"role": m["role"], "content": m["content"]}
    return chat_message(m)


def _corrupt(raw: Sequence[bytes | str], where: str) -> CorruptHistoryError:
    index = _failing_index(raw)
    return CorruptHistoryError(
        f"stored envelope {where}at index {index} is not a valid message", index=index
    )


def _failing_index(raw: Sequence[bytes | str]) -> int | None:
    """The first envelope that does not validate (only run once a read has failed)."""
    for index, item in enumerate(raw):
        try:
            _ENVELOPE.validate_json(item) if item[-1] else _read_envelope(item)
        except _UNREADABLE:
            return index
    return None
