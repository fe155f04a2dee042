"""The stored form of a message: the serializer that writes it and the validators that read it.

Both are derived from :class:`~redis_history.models.Message`'s own pydantic core
schema, so a field added to the model is stored and read without a change here:

- **Writing** omits every field at its default (``content`` ``""``, ``tool_calls``
  ``[]``, ``tool_call_id`` and ``name`` ``null``, ``metadata`` and a call's
  ``arguments`` ``{}``) and writes ``created_at`` as integer milliseconds since
  the epoch when that is exact (an aware UTC datetime, whole milliseconds, after
  1970-08-20, where pydantic reads an integer as milliseconds), else as the ISO
  string pydantic writes, under the short name ``at`` (:data:`STAMP_NAME`; reads
  take ``created_at`` too, as messages stored before have it). The defaults are
  compared with plain values, not by calling the model's default factories (a fresh
  id and clock per message).
- **Reading** checks what ``Message._role_fields`` checks, but inside
  pydantic-core: one model schema per role behind a union tagged by ``role``
  (only an assistant carries tool calls, only a tool result and always a
  ``tool_call_id``), so building a message calls no Python. Only an assistant's
  calls, when present, are checked for unique ids in Python.

This is the one module that takes apart a core schema pydantic generated, whose
shape is pydantic's to change: tests/test_dependency_internals.py checks that it
is still the shape walked here (docs/internals.md).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from pydantic_core import CoreSchema, SchemaSerializer, SchemaValidator
from pydantic_core import core_schema as cs

from redis_history.models import Message, ToolCall

__all__ = [
    "EPOCH",
    "MS_MIN",
    "ROLES",
    "STAMP_NAME",
    "arguments_serializer",
    "envelope_schema",
    "model_of",
    "split",
    "stamp",
    "stored_serializer",
    "stored_validator",
    "with_fields",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_ZERO = timedelta(0)

MS_MIN = 20_000_000_000
"""The smallest integer pydantic reads as milliseconds rather than seconds (1970-08-20);
earlier instants are stored as ISO strings."""


def stamp(moment: datetime) -> int | datetime:
    """``created_at`` as stored: whole UTC milliseconds as an integer, else the datetime
    (written as pydantic's ISO string), so that it reads back equal either way."""
    if moment.microsecond % 1000 or (moment.tzinfo is not UTC and moment.utcoffset() != _ZERO):
        return moment  # sub-millisecond, naive (utcoffset() is None) or another offset
    ms = (moment - EPOCH) // _MS
    return ms if ms >= MS_MIN else moment


Schema = dict[str, Any]
"""A core schema being taken apart or put together (``CoreSchema`` is a union of
``TypedDict``s, too strict for that)."""


def split(schema: CoreSchema) -> tuple[Schema, list[CoreSchema]]:
    """A model's core schema without its ``definitions`` wrapper, and the definitions."""
    if schema["type"] == "definitions":
        return dict(schema["schema"]), list(schema["definitions"])
    return dict(schema), []


def _wrapped(schema: Schema, definitions: list[CoreSchema]) -> CoreSchema:
    core = cast(CoreSchema, schema)
    return cs.definitions_schema(core, definitions) if definitions else core


def model_of(schema: Schema) -> Schema:
    """The ``model`` schema, under a model validator if there is one."""
    while schema["type"] != "model":
        schema = schema["schema"]
    return schema


def with_fields(model: Schema, change: Callable[[str, Schema], Schema]) -> Schema:
    """A copy of ``model`` whose fields are ``change(name, field)``."""
    fields_schema = dict(model["schema"])
    fields_schema["fields"] = {
        name: change(name, dict(field)) for name, field in fields_schema["fields"].items()
    }
    out = {k: v for k, v in model.items() if k not in ("ref", "metadata")}
    out["schema"] = fields_schema
    return out


def _plain_default(name: str, field: Schema, defaults: Schema) -> Schema:
    """``field`` with its default factory replaced by the value it makes, or no default
    at all when the name is not in ``defaults`` (an id or a timestamp is never omitted)."""
    inner = field["schema"]
    if inner["type"] != "default" or "default_factory" not in inner:
        return field
    bare = inner["schema"]
    field["schema"] = (
        cs.with_default_schema(bare, default=defaults[name]) if name in defaults else bare
    )
    return field


# -- writing ---------------------------------------------------------------------------------


STAMP_NAME = "at"
"""The stored name of ``created_at`` (the envelope's fields are short: every message
carries each name). Reads take the model's own name as well, as messages stored before
were written."""

_STAMP_NAMES: list[list[str | int]] = [[STAMP_NAME], ["created_at"]]


def _writer_field(name: str, field: Schema) -> cs.TypedDictField:
    schema = _plain_default(name, field, {"metadata": {}})["schema"]
    if name == "created_at":
        schema = {
            **schema,
            "serialization": cs.plain_serializer_function_ser_schema(
                stamp, return_schema=cs.any_schema()
            ),
        }
        return cs.typed_dict_field(schema, serialization_alias=STAMP_NAME)
    return cs.typed_dict_field(schema)


def stored_serializer() -> SchemaSerializer:
    """Writes a :class:`Message`'s ``__dict__`` in its stored form (call with
    ``exclude_defaults=True, by_alias=True``: ``created_at`` is stored as ``at``). A model
    serializer would not do: pydantic-core hands an instance of ``Message`` to
    ``Message``'s own serializer, whatever the schema says."""
    schema, definitions = split(Message.__pydantic_core_schema__)
    fields = model_of(schema)["schema"]["fields"]
    stored = cs.typed_dict_schema(
        {name: _writer_field(name, dict(field)) for name, field in fields.items()}
    )
    return SchemaSerializer(_wrapped(dict(stored), definitions), model_of(schema).get("config"))


def arguments_serializer() -> SchemaSerializer:
    """Writes a tool call's ``arguments`` as :func:`stored_serializer` writes them in a
    message: the same schema and config (``ser_json_inf_nan``), so the same bytes."""
    schema, definitions = split(ToolCall.__pydantic_core_schema__)
    model = model_of(schema)
    field = model["schema"]["fields"]["arguments"]["schema"]
    if field["type"] == "default":
        field = field["schema"]
    return SchemaSerializer(_wrapped(dict(field), definitions), model.get("config"))


# -- reading ---------------------------------------------------------------------------------


def _unique_calls(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    if len(calls) > 1 and len({call.id for call in calls}) != len(calls):
        raise ValueError("tool call ids within one message must be unique")
    return calls


_NO_CALLS = cs.with_default_schema(
    cs.tuple_schema([cs.any_schema()], variadic_item_index=0, max_length=0), default=()
)
_NO_CALL_ID = cs.with_default_schema(cs.none_schema(), default=None)
_CALL_ID = cs.str_schema(strict=True, min_length=1)


def _role_model(model: Schema, role: str) -> Schema:
    """The model schema that accepts exactly the messages of ``role`` ``Message`` accepts."""

    def change(name: str, field: Schema) -> Schema:
        if name == "created_at":
            field["validation_alias"] = _STAMP_NAMES
        elif name == "tool_call_id":
            field["schema"] = _CALL_ID if role == "tool" else _NO_CALL_ID
        elif name == "tool_calls":
            if role == "assistant":
                default = dict(field["schema"])
                default["schema"] = cs.no_info_after_validator_function(
                    _unique_calls, default["schema"]
                )
                field["schema"] = default
            else:
                field["schema"] = _NO_CALLS
        return field

    return with_fields(model, change)


def _role_dict(model: Schema) -> Schema:
    """``model`` (a role's) as a typed dict holding what the JSON holds: the same checks,
    no defaults filled in but ``content``'s, and no model built."""
    fields: Schema = {}
    for name, field in model["schema"]["fields"].items():
        schema = field["schema"]
        if name == "created_at":
            fields[name] = cs.typed_dict_field(schema, validation_alias=_STAMP_NAMES)
        elif schema["type"] != "default":
            fields[name] = cs.typed_dict_field(schema)
        elif name == "content":
            fields[name] = cs.typed_dict_field(schema, required=False)
        else:
            fields[name] = cs.typed_dict_field(schema["schema"], required=False)
    config = model.get("config") or {}
    return dict(
        cs.typed_dict_schema(
            fields, extra_behavior=config.get("extra_fields_behavior"), config=model.get("config")
        )
    )


ROLES = ("system", "user", "assistant", "tool")


def stored_message_schema(*, models: bool = True) -> tuple[CoreSchema, list[CoreSchema]]:
    """A message as stored, validated without Python: a union tagged by role of ``Message``
    models (or, not ``models``, of dicts of the fields present), and the definitions."""
    schema, definitions = split(Message.__pydantic_core_schema__)
    if schema["type"] != "function-after" or schema["schema"]["type"] != "model":
        raise AssertionError("Message's schema is not a model under its role check")
    model = model_of(schema)
    choices = {role: _role_model(model, role) for role in ROLES}
    if not models:
        choices = {role: _role_dict(choice) for role, choice in choices.items()}
    union = cs.tagged_union_schema(cast(dict[Any, CoreSchema], choices), discriminator="role")
    return union, definitions


def stored_validator(
    wrap: Callable[[CoreSchema], CoreSchema], *, models: bool = True
) -> SchemaValidator:
    """A validator of ``wrap(message)``, ``message`` being the stored message's schema."""
    message, definitions = stored_message_schema(models=models)
    return SchemaValidator(_wrapped(dict(wrap(message)), definitions))


def envelope_schema(message: CoreSchema) -> CoreSchema:
    """An envelope as a dict: ``t``, ``x`` and ``s`` (absent when left out: a smaller
    dict, which is most of what a read of short messages builds), ``m``."""
    return cs.typed_dict_schema(
        {
            "t": cs.typed_dict_field(cs.int_schema(ge=0)),
            "x": cs.typed_dict_field(cs.bool_schema(), required=False),
            "s": cs.typed_dict_field(cs.bool_schema(), required=False),
            "m": cs.typed_dict_field(message),
        }
    )
