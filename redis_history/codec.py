"""The stored form of a message (the envelope) and the script arguments built from it.

An envelope is the message JSON wrapped with its token count::

    {"t":<tokens>,"x":<1 if exact>,"s":<1 if a summary>,"m":<message>}

The fixed field order lets the Lua scripts read ``t`` with a pattern match
instead of decoding a message that may be a megabyte long. A write sends the
envelopes with one role item per message, so the scripts check role order and
tool pairing without decoding JSON either.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from redis_history.errors import CorruptHistoryError, MessageTooLargeError
from redis_history.models import Message
from redis_history.tokens import TokenCounter, message_tokens

__all__ = ["Entry", "batch_args", "decode_entries", "encode_message", "role_item"]


class Entry(BaseModel):
    """A stored message with what the store knows about it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    tokens: int = Field(alias="t", ge=0)
    """Token count computed once, at write time."""
    exact: bool = Field(alias="x")
    """Whether ``tokens`` came from an exact tokenizer rather than a heuristic."""
    summary: bool = Field(alias="s", default=False)
    """Whether this message was written by ``splice_prefix`` in place of originals."""
    message: Message = Field(alias="m")
    """The message itself."""


_ENTRIES: TypeAdapter[list[Entry]] = TypeAdapter(list[Entry])


def encode_message(
    message: Message,
    counter: TokenCounter,
    max_bytes: int,
    *,
    summary: bool = False,
    index: int = 0,
) -> tuple[bytes, int]:
    """One message's envelope and token count; raises ``MessageTooLargeError``."""
    if not isinstance(message, Message):
        raise TypeError(f"expected a Message at index {index}, got {type(message).__name__}")
    tokens = message_tokens(message, counter)
    envelope = b'{"t":%d,"x":%d,"s":%d,"m":%s}' % (
        tokens,
        counter.exact,
        summary,
        message.__pydantic_serializer__.to_json(message),
    )
    if len(envelope) > max_bytes:
        raise MessageTooLargeError(
            f"message {message.id} is {len(envelope)} bytes stored; the limit is {max_bytes}",
            index=index,
        )
    return envelope, tokens


def role_item(message: Message) -> tuple[str | int, ...]:
    """What the scripts check role order and pairing on (``walk`` in
    ``lua/includes/batch.lua``): the role; a tool result adds the call id it
    answers; an assistant adds the number of its tool calls and their ids."""
    role = message.role
    if role == "tool":
        return role, message.tool_call_id or ""
    if role == "assistant":
        return role, len(message.tool_calls), *[call.id for call in message.tool_calls]
    return (role,)


def batch_args(
    head: tuple[str | int, ...],
    messages: Sequence[Message],
    counter: TokenCounter,
    max_bytes: int,
    *,
    summary: bool = False,
) -> tuple[bytes | str | int, ...]:
    """A write script's arguments: ``head`` (ending with the ttl), then the batch
    (``read_batch`` in ``lua/includes/batch.lua``): the token sum, the count, the
    envelopes, then the role items."""
    envelopes: list[bytes] = []
    roles: list[str | int] = []
    total = 0
    for index, message in enumerate(messages):
        envelope, tokens = encode_message(message, counter, max_bytes, summary=summary, index=index)
        envelopes.append(envelope)
        roles += role_item(message)
        total += tokens
    return *head, total, len(envelopes), *envelopes, *roles


def decode_entries(raw: Sequence[bytes | str], *, where: str = "") -> list[Entry]:
    """Validate stored envelopes in one pydantic call; raises ``CorruptHistoryError``."""
    if not raw:
        return []
    if isinstance(raw[0], bytes):
        payload: bytes | str = b"[" + b",".join(raw) + b"]"  # type: ignore[arg-type]
    else:
        payload = "[" + ",".join(raw) + "]"  # type: ignore[arg-type]
    try:
        with _gc_paused(len(raw)):
            return _ENTRIES.validate_json(payload)
    except ValidationError as exc:
        index = _failing_index(raw)
        raise CorruptHistoryError(
            f"stored envelope {where}at index {index} is not a valid message", index=index
        ) from exc


GC_PAUSE_MIN = 256
"""Lists at least this long are decoded with the cyclic GC paused (see ``_gc_paused``)."""


@contextmanager
def _gc_paused(count: int) -> Iterator[None]:
    """Pause the cyclic GC while a long list is decoded.

    Decoding allocates thousands of objects, none of them garbage, and each
    allocation burst triggers collections that rescan the growing result: a
    quarter of the time at 5000 messages. The GC is resumed only if this call
    paused it, so a caller's own ``gc.disable()`` stands.
    """
    if count < GC_PAUSE_MIN or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _failing_index(raw: Sequence[bytes | str]) -> int | None:
    """The first envelope that does not validate on its own (only run once a list has failed)."""
    for index, item in enumerate(raw):
        try:
            Entry.model_validate_json(item)
        except ValidationError:
            return index
    return None
