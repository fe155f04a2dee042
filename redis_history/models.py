"""Chat messages as immutable pydantic models, and their OpenAI wire format.

What a message may hold is checked in two places, each where the fact is known:

- **When it is built**, pydantic refuses anything that is not JSON data, with a
  ``ValidationError`` (a ``ValueError``) naming the field: text fields are
  strict ``str`` (no bytes); ``metadata`` and tool-call ``arguments`` hold only
  ``JsonValue`` data (dict with str keys, list, str, int, float, bool, None; no
  sets, tuples, bytes, datetimes or other objects), finite floats (JSON has no
  NaN or infinity) and nest at most :data:`MAX_NESTING` levels.
- **When it is written**, :func:`redis_history.store.codec.encode_message` refuses
  what only the stored form shows, with :class:`~redis_history.errors.InvalidMessageError`
  naming the field and the index in the batch, before anything reaches Redis:
  a lone surrogate in any string (UTF-8 cannot encode it; pydantic already
  refuses one in the length-limited ids and tool names when built), and more
  than ``max_message_bytes``.

A message a history accepted therefore reads back equal to what was written.

JSON text a caller gives (tool-call ``arguments`` in a wire format) is parsed by
:func:`parse_json`, which refuses, with ``InvalidMessageError`` naming the field,
what is not JSON or nests deeper than ``MAX_NESTING`` (``json.loads`` would raise
``RecursionError`` on deep enough text).

JSON input (``model_validate_json``, which is also how reads validate) is
checked by the parser instead: it cannot hold bytes, sets or lone surrogates;
nesting past ``MAX_NESTING`` is refused when it is written; but a ``NaN`` or
``Infinity`` literal (not JSON, though Python's ``json.dumps`` writes it) is
kept. A message built without validation (``model_construct``), or whose
``metadata`` was changed afterwards, is written as pydantic serializes it: the
write still refuses lone surrogates, what the serializer cannot write and
nesting deeper than ``MAX_NESTING`` (which no read could parse), but a set
becomes a list. Non-finite floats that got in either way are written as
``NaN`` or ``Infinity``, which pydantic and the scripts' cjson read back,
never as a silent ``null``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    JsonValue,
    model_validator,
)
from pydantic_core import CoreSchema, core_schema, from_json

from redis_history.errors import InvalidMessageError, UnsupportedPartError
from redis_history.parts import (
    ContentPart,
    TextPart,
    from_openai_chat,
    stand_in,
    to_openai_chat,
)

__all__ = [
    "JSON_SCALARS",
    "MAX_ID_LENGTH",
    "MAX_NESTING",
    "MAX_PARTS",
    "JsonObject",
    "Message",
    "Role",
    "ToolCall",
    "check_nesting",
    "new_message_id",
    "parse_json",
]

Role = Literal["system", "user", "assistant", "tool"]
"""Who speaks: the four chat-completions roles."""

MAX_NESTING = 128
"""The deepest a message's ``metadata`` or a tool call's ``arguments`` may nest.

Each object or array is one level: ``{}`` and ``{"a": 1}`` are 1 deep,
``{"a": [1]}`` is 2. Reads must parse what writes stored, and pydantic-core's
JSON parser refuses documents nested more than 200 levels (measured with
pydantic 2.14 / pydantic-core 2.50; ``tests/test_nesting.py`` measures the
installed one). A read parses a value ``codec.ENVELOPE_NESTING`` (5) levels
down, so 128 leaves a margin of 67 levels.
"""

MAX_ID_LENGTH = 256
"""The longest message or tool call id."""

MAX_PARTS = 256
"""The most content parts one message may hold."""

JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
"""The types of JSON values that do not nest."""
_CONTAINERS = (dict, list)  # a tuple: isinstance is 2.5x slower with ``dict | list``


TOO_DEEP = f"nests deeper than MAX_NESTING = {MAX_NESTING} levels"


def _nests_within(value: Any) -> bool:
    """Whether ``value`` nests at most ``MAX_NESTING`` levels: a walk of its objects and
    arrays, one level at a time, so no depth can exhaust the stack."""
    level: list[Any] = [value] if isinstance(value, _CONTAINERS) else []
    for _ in range(MAX_NESTING):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, _CONTAINERS)
        ]
        if not level:
            return True
    return False


def _within_nesting(value: Any) -> Any:
    """``value`` if it nests at most ``MAX_NESTING`` levels."""
    if not isinstance(value, dict) or JSON_SCALARS.issuperset(map(type, value.values())):
        return value
    if _nests_within(value):
        return value
    raise ValueError(TOO_DEEP)


def parse_json(text: str | bytes, what: str, *, lenient: bool = False) -> Any:
    """JSON text a caller gave, parsed, if it nests at most ``MAX_NESTING`` levels.

    pydantic-core's parser, not ``json.loads``, which recurses and raises
    ``RecursionError`` on deep text: this one stops at its own, higher, limit with a
    ``ValueError``. What it accepts is then held to ``MAX_NESTING``, the limit every
    write enforces, so what parses here can be stored and read back.

    Args:
        text: the JSON text.
        what: the field, for the error (``"tool call 'c1' arguments"``).
        lenient: text that is not JSON gives ``None`` instead of raising; text nested
            too deep still raises.

    Raises:
        InvalidMessageError: naming ``what``: the text nests too deep, or is not JSON.
    """
    try:
        value = from_json(text)
    except ValueError as exc:
        if "recursion limit" in str(exc):  # the parser's own limit, past MAX_NESTING
            raise InvalidMessageError(f"{what} {TOO_DEEP}") from None
        if lenient:
            return None
        raise InvalidMessageError(f"{what} is not JSON: {exc}") from None
    check_nesting(value, what)
    return value


def check_nesting(value: Any, what: str) -> None:
    """Refuse ``value`` if it nests deeper than ``MAX_NESTING`` levels.

    Raises:
        InvalidMessageError: naming ``what``.
    """
    if not _nests_within(value):
        raise InvalidMessageError(f"{what} {TOO_DEEP}")


class _JsonObjectSchema:
    """``dict[str, JsonValue]``, with the nesting checked before ``JsonValue`` recurses.

    Only on Python input. On JSON input (every read) ``JsonValue`` is a plain
    ``any`` and the nesting is bounded by the parser, so reads pay nothing; a
    message validated from JSON that nests too deep for the margin is refused
    when written. Serialized as ``any``: a ``dict[str, ...]`` serializer writes
    U+FFFD for a lone surrogate in a key, where ``any`` raises.
    """

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        schema = handler.generate_schema(dict[str, JsonValue])
        return core_schema.json_or_python_schema(
            json_schema=schema,
            python_schema=core_schema.no_info_before_validator_function(_within_nesting, schema),
            serialization=core_schema.simple_ser_schema("any"),
        )


# Type checkers see dict[str, Any], so readers need not narrow every value.
if TYPE_CHECKING:
    JsonObject = dict[str, Any]
else:
    JsonObject = Annotated[dict[str, Any], _JsonObjectSchema]

_MESSAGE_CONFIG = ConfigDict(
    frozen=True,
    extra="forbid",
    # NaN and infinity are not JSON: refused when built from Python. Should one get in
    # anyway (JSON input, model_construct, a dict changed afterwards) it is written as
    # NaN or Infinity, which pydantic and the scripts' cjson read back, not as null.
    allow_inf_nan=False,
    ser_json_inf_nan="constants",
)


def new_message_id() -> str:
    """A fresh, globally unique message id: 128 random bits in 22 URL-safe characters
    (every stored message carries its id; a uuid's 32 hex digits hold no more)."""
    return secrets.token_urlsafe(16)


def _now() -> datetime:
    """Now, in UTC, to the millisecond: what the stored form writes as a short integer."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


class ToolCall(BaseModel):
    """One function call requested by an assistant message."""

    model_config = _MESSAGE_CONFIG

    id: str = Field(min_length=1, max_length=MAX_ID_LENGTH, strict=True)
    """The call id a tool message answers with ``tool_call_id``."""
    name: str = Field(min_length=1, strict=True)
    """The function's name."""
    arguments: JsonObject = Field(default_factory=dict)
    """The decoded JSON arguments: JSON data, finite numbers, at most ``MAX_NESTING`` deep."""

    def to_openai(self) -> dict[str, Any]:
        """This call in the chat-completions ``tool_calls`` format."""
        return {
            "id": self.id,
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": json.dumps(self.arguments, ensure_ascii=False),
            },
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Self:
        """Parse a chat-completions tool call; ``arguments`` may be a JSON string or an object.

        Raises:
            InvalidMessageError: ``arguments`` is not a JSON object, or is text that nests
                deeper than ``MAX_NESTING``.
            ValueError: pydantic's ``ValidationError``, naming the field: what a
                :class:`ToolCall` cannot hold (an object ``arguments`` nested too deep).
        """
        function = data.get("function") or {}
        raw = function.get("arguments") or {}
        if isinstance(raw, str):
            raw = parse_json(raw, f"tool call {data.get('id')!r} arguments") if raw.strip() else {}
        if not isinstance(raw, dict):
            raise InvalidMessageError(
                f"tool call {data.get('id')!r} arguments must be a JSON object"
            )
        return cls(id=data.get("id", ""), name=function.get("name", ""), arguments=raw)


class Message(BaseModel):
    """One chat message: the unit a history stores, validates and counts.

    Construction raises pydantic's ``ValidationError`` (a ``ValueError``) for
    anything that is not JSON data: bytes in a text field, a set, tuple, bytes,
    datetime or other object in ``metadata`` or tool-call ``arguments``, NaN or
    infinity, nesting deeper than ``MAX_NESTING``. A write then raises
    ``InvalidMessageError`` for what only the stored form shows (a lone
    surrogate, the size); see this module's docstring.
    """

    model_config = _MESSAGE_CONFIG

    id: str = Field(
        default_factory=new_message_id, min_length=1, max_length=MAX_ID_LENGTH, strict=True
    )
    """Unique id, assigned on creation when not given; compaction fences on it."""
    role: Role
    """Who speaks."""
    content: str = Field(default="", strict=True)
    """The text of the message (may be empty for an assistant that only calls tools, and is
    empty when the message holds ``parts``)."""
    parts: tuple[ContentPart, ...] = Field(default=(), max_length=MAX_PARTS)
    """The content as parts, in order (text, images, files, audio; :mod:`redis_history.parts`),
    when it is more than text; ``content`` is empty then. :attr:`text` is the text either way."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Function calls requested by an assistant message."""
    tool_call_id: str | None = Field(default=None, strict=True)
    """For a tool message: the id of the assistant tool call it answers."""
    name: str | None = Field(default=None, strict=True)
    """Optional participant or tool name."""
    metadata: JsonObject = Field(default_factory=dict)
    """Free-form data the application keeps with the message: JSON data, finite numbers,
    at most ``MAX_NESTING`` deep."""
    created_at: datetime = Field(default_factory=_now)
    """When the message was created (UTC, to the millisecond unless given)."""

    @model_validator(mode="after")
    def _role_fields(self) -> Self:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError("only tool messages carry tool_call_id")
        ids = [call.id for call in self.tool_calls]
        if len(set(ids)) != len(ids):
            raise ValueError("tool call ids within one message must be unique")
        if self.parts and self.content:
            raise ValueError("a message holds content or parts, not both")
        if self.parts and self.role in ("system", "assistant"):
            kinds = {p.type for p in self.parts} - {"text"}
            if kinds:
                raise ValueError(f"a {self.role} message carries text only, not {sorted(kinds)}")
        return self

    @property
    def text(self) -> str:
        """The message's text: ``content``, or its text parts joined."""
        if not self.parts:
            return self.content
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def readable(self) -> str:
        """The text with a short stand-in for each other part (``[image: image/png, 182
        KB]``): what a summarizer or a transcript reads."""
        if not self.parts:
            return self.content
        pieces = [p.text if isinstance(p, TextPart) else f" {stand_in(p)} " for p in self.parts]
        return "".join(pieces).strip()

    @classmethod
    def system(cls, content: str, **fields: Any) -> Self:
        """A system prompt."""
        return cls(role="system", content=content, **fields)

    @classmethod
    def user(cls, content: str | Sequence[str | ContentPart], **fields: Any) -> Self:
        """A user message: text, or a list of text and parts
        (``Message.user(["What is this?", ImagePart(data=png, media_type="image/png")])``)."""
        return cls(role="user", **_content_fields(content), **fields)

    @classmethod
    def assistant(
        cls, content: str = "", *, tool_calls: Iterable[ToolCall] = (), **fields: Any
    ) -> Self:
        """An assistant reply, optionally requesting tool calls."""
        return cls(role="assistant", content=content, tool_calls=tuple(tool_calls), **fields)

    @classmethod
    def tool(
        cls, content: str | Sequence[str | ContentPart], *, tool_call_id: str, **fields: Any
    ) -> Self:
        """A tool result answering ``tool_call_id``: text, or text and parts (a screenshot)."""
        return cls(role="tool", tool_call_id=tool_call_id, **_content_fields(content), **fields)

    def to_openai(self) -> dict[str, Any]:
        """This message as a chat-completions request message (:func:`chat_message`).

        Raises:
            UnsupportedPartError: a part chat completions cannot carry (see
                :func:`chat_message`).
        """
        return chat_message(self.__dict__)

    @classmethod
    def from_openai(cls, data: Mapping[str, Any], **fields: Any) -> Self:
        """Parse a chat-completions message; ``developer`` maps to ``system``.

        Content given as a list of parts is kept as parts (:func:`~redis_history.parts.
        from_openai_chat`), or as text when they are all text; a part of an unknown type
        raises ``InvalidMessageError`` rather than being dropped silently.
        """
        role = data.get("role")
        if role == "developer":
            role = "system"
        return cls(
            role=role,
            **_content_fields(_chat_content(data.get("content"))),
            tool_calls=tuple(ToolCall.from_openai(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            **fields,
        )


def chat_message(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A message as a chat-completions request message, from its fields: a model's, or a
    stored message's (the fields at their default left out). The one rendering of the
    format: ``Message.to_openai``, ``snapshot_openai`` and the ``openai_chat`` wire format
    all use it. ``name`` is sent except on a tool result, which the API gives none.

    Raises:
        UnsupportedPartError: a part chat completions cannot carry: a file by URL, an image
            by file id, or anything but text in a tool result (its content is text only).
    """
    role, content = fields["role"], fields.get("content", "")
    if parts := fields.get("parts"):
        if role == "tool":
            for part in parts:
                if not isinstance(part, TextPart):
                    raise UnsupportedPartError(
                        f"the openai_chat format cannot carry {stand_in(part)} in a tool "
                        "message: a chat-completions tool result holds text only",
                        part=part.type,
                        format="openai_chat",
                    )
        content = [to_openai_chat(part) for part in parts]
    out: dict[str, Any] = {"role": role, "content": content}
    if (name := fields.get("name")) is not None and role != "tool":
        out["name"] = name
    if calls := fields.get("tool_calls"):
        out["tool_calls"] = [call.to_openai() for call in calls]
        if not content:
            out["content"] = None
    if (call_id := fields.get("tool_call_id")) is not None:
        out["tool_call_id"] = call_id
    return out


def _content_fields(content: str | Sequence[str | ContentPart]) -> dict[str, Any]:
    """``content`` for a factory: text as is; a list of strings and parts as ``parts``, or,
    when it holds only text, as the text joined."""
    if isinstance(content, str):
        return {"content": content}
    parts = [TextPart(text=p) if isinstance(p, str) else p for p in content]
    if all(isinstance(p, TextPart) for p in parts):
        return {"content": "".join(p.text for p in parts if isinstance(p, TextPart))}
    return {"parts": tuple(parts)}


def _chat_content(content: str | Sequence[Mapping[str, Any]] | None) -> str | list[Any]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return [from_openai_chat(part) for part in content]
