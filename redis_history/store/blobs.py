"""Blobs: a content part's inline data stored once per conversation, outside the message list.

An image sent in five messages is stored once, and the list, which appends, walks and
snapshots go over, stays small. Inline data of at least :data:`~redis_history.limits.
BLOB_MIN_BYTES` is written to the conversation's meta hash as the field ``blob:<digest>``
(a 16-byte BLAKE2b, hex), in the same script as the message (``lua/includes/blobs.lua``),
and the part in the envelope holds ``"blob":"<digest>:<bytes>"`` instead of ``"data"``. Being fields
of the meta hash, the blobs have the conversation's TTL, slot, ``delete`` and import for
free. They are never removed before the conversation is (a message rolled back or
compacted away may share its data with another), and the meta field ``blobs`` counts
their bytes against :data:`~redis_history.limits.MAX_CONVERSATION_BLOB_BYTES`.

A read that meets such parts (:class:`~redis_history.parts.BlobsWanted`) reads their data
with one ``HMGET`` per 20 MiB of it (:func:`reads`: no call runs long) and decodes again
with it (:func:`~redis_history.parts.blob_data`):
blobs are written before any envelope that names them and removed only with the whole
conversation, so the second read finds them unless the conversation is gone.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from redis_history import limits
from redis_history.errors import CorruptHistoryError, LimitExceededError
from redis_history.models import Message

__all__ = ["FIELD", "blobs_of", "digest", "field_names", "found", "named", "outside", "reads"]

FIELD = "blob:"
"""The meta hash field of a blob is this and its digest."""
_MARKER = b"\x00redis-history blob "


def digest(data: bytes) -> str:
    """The name a blob is stored under: its 16-byte BLAKE2b, in hex."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _stored_outside(part: Any) -> bytes | None:
    data = getattr(part, "data", None)
    return data if data is not None and len(data) >= limits.BLOB_MIN_BYTES else None


def blobs_of(
    messages: Iterable[Message], *, most: int = limits.MAX_WRITE_BLOB_BYTES
) -> dict[str, bytes]:
    """The data of ``messages``' parts that is stored outside the list, by digest (each
    once), checked against the limits.

    Raises:
        LimitExceededError: a part's data over ``MAX_BLOB_BYTES`` (``index`` is its
            message's), or all of it over ``most`` (one write's limit by default).
    """
    out: dict[str, bytes] = {}
    for index, message in enumerate(messages):
        for part in message.parts:
            if (data := _stored_outside(part)) is None:
                continue
            if len(data) > limits.MAX_BLOB_BYTES:
                raise LimitExceededError(
                    f"message {message.id!r} at index {index}: a part's inline data of "
                    f"{len(data)} bytes is over MAX_BLOB_BYTES = {limits.MAX_BLOB_BYTES}",
                    index=index,
                )
            out[digest(data)] = data
    limits.limited(
        sum(map(len, out.values())),
        most,
        "bytes of inline data in one write"
        if most == limits.MAX_WRITE_BLOB_BYTES
        else "bytes of inline data",
    )
    return out


def outside(message: Message) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]] | None:
    """What the stored serializer is given for ``message`` so that its large inline data
    is left out: its fields with each such part's data replaced by a marker, and the JSON
    text of each marker with the ``"blob"`` reference that takes its place; ``None`` when
    the message has no such part. The marker names the digest, so it cannot be met in
    the JSON but where it was put."""
    changed: list[Any] = []
    swaps: list[tuple[bytes, bytes]] = []
    for part in message.parts:
        data = _stored_outside(part)
        if data is None:
            changed.append(part)
            continue
        name = digest(data)
        marker = _MARKER + name.encode()
        changed.append(part.model_copy(update={"data": marker}))
        reference = f"{name}:{len(data)}".encode()
        swaps.append(
            (b'"data":"' + base64.b64encode(marker) + b'"', b'"blob":"' + reference + b'"')
        )
    if not swaps:
        return None
    return {**message.__dict__, "parts": tuple(changed)}, swaps


def reads(references: Iterable[str]) -> list[list[str]]:
    """``references`` (``<digest>:<bytes>``, as envelopes name their blobs) in groups of at
    most ``MAX_WRITE_BLOB_BYTES`` of data, or one blob: one ``HMGET`` each, so that no read
    of them runs long on the server.

    Raises:
        CorruptHistoryError: a reference that is not a digest and a size.
    """
    groups: list[list[str]] = []
    size = limits.MAX_WRITE_BLOB_BYTES + 1
    for reference in sorted(references):
        name, _, length = reference.partition(":")
        if len(name) != 32 or not length.isdigit():
            raise CorruptHistoryError(f"a message names blob {reference!r}, which is not one")
        if size + int(length) > limits.MAX_WRITE_BLOB_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(reference)
        size += int(length)
    return groups


def field_names(references: Sequence[str]) -> list[str]:
    """The meta hash fields of ``references``."""
    return [FIELD + reference.partition(":")[0] for reference in references]


def named(reference: str) -> str:
    """The digest a reference names."""
    return reference.partition(":")[0]


def found(references: Sequence[str], values: Sequence[bytes | str | None]) -> Mapping[str, bytes]:
    """The data an ``HMGET`` of ``references`` returned, by reference.

    Raises:
        CorruptHistoryError: a blob an envelope names is not there (the conversation was
            deleted or expired meanwhile, or its meta hash was edited).
    """
    out: dict[str, bytes] = {}
    for reference, value in zip(references, values, strict=True):
        if value is None:
            raise CorruptHistoryError(
                f"the data of blob {named(reference)}, which a message names, is missing"
            )
        out[reference] = value.encode() if isinstance(value, str) else value
    return out
