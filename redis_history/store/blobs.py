"""Blobs: a content part's inline data stored once per conversation, outside the message list.

An image sent in five messages is stored once, and the list, which appends, walks and
snapshots go over, stays small. Inline data of at least :data:`~redis_history.limits.
BLOB_MIN_BYTES` is written to the conversation's meta hash as the field ``blob:<digest>``
(a 16-byte BLAKE2b, hex), in the same script as the message (``lua/includes/blobs.lua``),
and the part in the envelope holds ``"blob":"<digest>:<bytes>"`` instead of ``"data"``.
Being fields of the meta hash, the pieces have the conversation's TTL, slot, ``delete``
and import for free.

**Counted.** An envelope also names its pieces in its head, ``"b":"<digest><digest>..."``
(:func:`head_names`), so the scripts count, without decoding a message, how many entries of
the list and of the archive name each piece: the meta field ``ref:<digest>`` holds
``<live>,<archived>,<bytes>``, ``refs:<xy>`` the digests of the counted pieces that start
with ``xy`` (so that a new piece rewrites a 256th of the list of them), ``blobs`` the bytes
of every piece, which :data:`~redis_history.limits.MAX_CONVERSATION_BLOB_BYTES` bounds,
and ``cblobs`` and ``cpieces`` the bytes and number of the counted ones, which
:data:`~redis_history.limits.MAX_CONVERSATION_BLOBS` bounds. A rewrite that drops the
last entry naming a piece (a splice's archive cap, a truncate, a rollback, a replace)
deletes the piece in the same script. A piece stored before pieces were counted has no
record: it is pinned, kept and counted until the conversation is deleted, since the
entries written then name it without a head.

**Read.** A read that meets such parts (:class:`~redis_history.parts.BlobsWanted`) reads
their data with one ``HMGET`` per 20 MiB of it (:func:`reads`: no call runs long), the
meta hash's ``version`` with it, checks each piece against its digest (:func:`found`) and
decodes again with them (:func:`~redis_history.parts.blob_data`). A piece missing there
was deleted by a rewrite between the two reads (or the conversation was): the read is made
again, :data:`READ_ATTEMPTS` times at most.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from redis_history import limits
from redis_history.errors import CorruptHistoryError, LimitExceededError
from redis_history.models import Message

__all__ = [
    "COUNTED",
    "FIELD",
    "LISTS",
    "PIECES",
    "READ_ATTEMPTS",
    "RECORD",
    "BlobMissingError",
    "blobs_of",
    "digest",
    "field_names",
    "found",
    "head_names",
    "named",
    "outside",
    "reads",
    "records",
    "section",
]

FIELD = "blob:"
"""The meta hash field of a piece's data is this and its digest."""
RECORD = "ref:"
"""The meta hash field of a piece's count record (``<live>,<archived>,<bytes>``) is this and
its digest."""
LISTS = "refs:"
"""The meta hash field listing the counted pieces whose digests start with two hex digits
is this and those digits; it holds their digests, 32 hex digits each."""
COUNTED = "cblobs"
"""The meta hash field counting the bytes of the counted pieces (``blobs`` counts them all:
it is over this by the pinned pieces' bytes)."""
PIECES = "cpieces"
"""The meta hash field counting the counted pieces."""
READ_ATTEMPTS = 3
"""How many times a read is made when a piece its entries name was deleted meanwhile."""
_MARKER = b"\x00redis-history blob "
_HEAD = re.compile(rb'\{"t":\d+,([\w":,]*?)"m":\{')
"""An envelope's head up to its message: its flags, which the ``b`` of its pieces is one of."""
_NAMES = re.compile(rb'"b":"([0-9a-f]+)"')


class BlobMissingError(CorruptHistoryError):
    """A piece an entry names is not in the meta hash: deleted by a rewrite since the entry
    was read (the read is made again), or lost. ``version`` is the conversation's version
    when it was looked for."""

    def __init__(self, message: str, *, version: int | None) -> None:
        super().__init__(message)
        self.version = version


def digest(data: bytes) -> str:
    """The name a blob is stored under: its 16-byte BLAKE2b, in hex."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _stored_outside(part: Any) -> bytes | None:
    data = getattr(part, "data", None)
    return data if data is not None and len(data) >= limits.BLOB_MIN_BYTES else None


def _pieces(messages: Iterable[Message], most: int) -> tuple[dict[str, bytes], Counter[str]]:
    """The data kept outside the list by digest, and how many of ``messages`` name each."""
    out: dict[str, bytes] = {}
    naming: Counter[str] = Counter()
    for index, message in enumerate(messages):
        names: set[str] = set()
        for part in message.parts:
            if (data := _stored_outside(part)) is None:
                continue
            if len(data) > limits.MAX_BLOB_BYTES:
                raise LimitExceededError(
                    f"message {message.id!r} at index {index}: a part's inline data of "
                    f"{len(data)} bytes is over MAX_BLOB_BYTES = {limits.MAX_BLOB_BYTES}",
                    index=index,
                )
            name = digest(data)
            out[name] = data
            names.add(name)
        naming.update(names)
    limits.limited(
        sum(map(len, out.values())),
        most,
        "bytes of inline data in one write"
        if most == limits.MAX_WRITE_BLOB_BYTES
        else "bytes of inline data",
    )
    return out, naming


def blobs_of(
    messages: Iterable[Message], *, most: int = limits.MAX_WRITE_BLOB_BYTES
) -> dict[str, bytes]:
    """The data of ``messages``' parts that is stored outside the list, by digest (each
    once), checked against the limits.

    Raises:
        LimitExceededError: a part's data over ``MAX_BLOB_BYTES`` (``index`` is its
            message's), or all of it over ``most`` (one write's limit by default).
    """
    return _pieces(messages, most)[0]


def section(messages: Sequence[Message]) -> tuple[Any, ...]:
    """The blobs section of a write's arguments (``lua/includes/blobs.lua``): how many
    pieces, then the digest of each, how many of ``messages`` name it, and its data.

    Raises:
        LimitExceededError: what :func:`blobs_of` refuses, or more than
            ``MAX_WRITE_BLOBS`` pieces.
    """
    data, naming = _pieces(messages, limits.MAX_WRITE_BLOB_BYTES)
    limits.limited(len(data), limits.MAX_WRITE_BLOBS, "pieces of inline data in one write")
    return (
        len(data),
        *(item for name, value in data.items() for item in (name, naming[name], value)),
    )


def outside(message: Message) -> tuple[dict[str, Any], list[tuple[bytes, bytes]], bytes] | None:
    """What the stored serializer is given for ``message`` so that its large inline data
    is left out: its fields with each such part's data replaced by a marker, the JSON
    text of each marker with the ``"blob"`` reference that takes its place, and the digests
    its envelope's head names (each once); ``None`` when the message has no such part. The
    marker names the digest, so it cannot be met in the JSON but where it was put."""
    changed: list[Any] = []
    swaps: list[tuple[bytes, bytes]] = []
    names: dict[str, None] = {}
    for part in message.parts:
        data = _stored_outside(part)
        if data is None:
            changed.append(part)
            continue
        name = digest(data)
        names[name] = None
        marker = _MARKER + name.encode()
        changed.append(part.model_copy(update={"data": marker}))
        reference = f"{name}:{len(data)}".encode()
        swaps.append(
            (b'"data":"' + base64.b64encode(marker) + b'"', b'"blob":"' + reference + b'"')
        )
    if not swaps:
        return None
    return {**message.__dict__, "parts": tuple(changed)}, swaps, "".join(names).encode()


def head_names(envelope: bytes | str) -> list[str]:
    """The digests of the pieces an envelope's head names (none for one written before
    pieces were counted, which may name some in its message all the same)."""
    if isinstance(envelope, str):
        envelope = envelope.encode()
    head = _HEAD.match(envelope)
    found = head and _NAMES.search(head[1])
    if not found:
        return []
    names = found[1].decode()
    return [names[i : i + 32] for i in range(0, len(names), 32)]


def records(
    live: Iterable[bytes], archive: Iterable[bytes], sizes: Mapping[str, int], pinned: set[str]
) -> dict[str, str]:
    """The count records, lists and sums of a conversation copied whole (an import, a fork)
    whose entries are ``live`` and ``archive``: a record for each piece their heads name,
    unless ``pinned`` (named by an entry without a head: kept uncounted), of ``sizes``
    bytes.

    Raises:
        LimitExceededError: more than ``MAX_CONVERSATION_BLOBS`` pieces counted.
    """
    counts: dict[str, list[int]] = {}
    for which, envelopes in enumerate((live, archive)):
        for envelope in envelopes:
            for name in head_names(envelope):
                if name not in pinned:
                    counts.setdefault(name, [0, 0])[which] += 1
    limits.limited(len(counts), limits.MAX_CONVERSATION_BLOBS, "pieces of inline data counted")
    out = {RECORD + name: f"{n[0]},{n[1]},{sizes[name]}" for name, n in counts.items()}
    for name in sorted(counts):
        out[LISTS + name[:2]] = out.get(LISTS + name[:2], "") + name
    if counts:
        out[COUNTED] = str(sum(sizes[name] for name in counts))
        out[PIECES] = str(len(counts))
    return out


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
    """The meta hash fields an ``HMGET`` of ``references`` reads: ``version``, then their
    data's."""
    return ["version", *(FIELD + reference.partition(":")[0] for reference in references)]


def named(reference: str) -> str:
    """The digest a reference names."""
    return reference.partition(":")[0]


def found(references: Sequence[str], values: Sequence[bytes | str | None]) -> Mapping[str, bytes]:
    """The data an ``HMGET`` of :func:`field_names` returned, by reference, each checked
    against its digest.

    Raises:
        BlobMissingError: a blob an envelope names is not there (a rewrite dropped the
            last entry naming it since, the conversation was deleted or expired meanwhile,
            or its meta hash was edited).
        CorruptHistoryError: a blob's bytes are not the ones its digest names.
    """
    version, *data = values
    out: dict[str, bytes] = {}
    for reference, value in zip(references, data, strict=True):
        if value is None:
            raise BlobMissingError(
                f"the data of blob {named(reference)}, which a message names, is missing",
                version=None if version is None else int(version),
            )
        piece = value.encode() if isinstance(value, str) else value
        if digest(piece) != named(reference):
            raise CorruptHistoryError(
                f"the data of blob {named(reference)} ({len(piece)} bytes) does not match its "
                "digest: it was altered"
            )
        out[reference] = piece
    return out
