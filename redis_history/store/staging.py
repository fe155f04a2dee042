"""Putting a conversation copied whole in place at once: the calls an import and a fork share.

The copy is written first, in chunks within the limits of one write, to staging keys under
the conversation's hash tag (:meth:`~redis_history.store.keys.ConversationKeys.restoring`),
each expiring after :data:`STAGE_TTL_MS` should the copy never finish
(``lua/stage-1.lua``); then one script renames them over the conversation's keys
(``lua/restore-8.lua``), refusing when the conversation exists unless told to replace it.
No reader sees part of a copy, on a Redis Cluster too: every key is in the conversation's
slot. Like the rest of the store's core, this builds calls and sends nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any

from redis_history.errors import HistoryError
from redis_history.limits import MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, MAX_WRITE_BLOB_BYTES
from redis_history.roles import RoleState
from redis_history.store import blobs
from redis_history.store.codec import read_size
from redis_history.store.core import _call
from redis_history.store.keys import ConversationKeys
from redis_history.wire.call import Call

__all__ = [
    "STAGE_TTL_MS",
    "chunks",
    "meta_hash",
    "restore_call",
    "stage_calls",
]

STAGE_TTL_MS = 3_600_000
"""Staging keys expire after an hour, should the copy never be put in place."""


def chunks(envelopes: Sequence[bytes]) -> Iterator[Sequence[bytes]]:
    """``envelopes`` in runs of at most ``MAX_BATCH_MESSAGES`` and ``MAX_BATCH_BYTES`` of
    what a reader gets back (:func:`~redis_history.store.codec.read_size`), as one write
    of the store."""
    start, size = 0, 0
    for index, envelope in enumerate(envelopes):
        read = read_size(envelope)
        if index - start == MAX_BATCH_MESSAGES or (size + read > MAX_BATCH_BYTES and size):
            yield envelopes[start:index]
            start, size = index, 0
        size += read
    if start < len(envelopes):
        yield envelopes[start:]


def meta_hash(
    turn: RoleState, total: int, archive: Sequence[bytes], **fields: str | int | None
) -> dict[str, str | int]:
    """The meta hash of a conversation copied whole: its token ``total``, the turn state
    after its live messages, the size of its ``archive`` as written, and those of ``fields``
    (``baseline``, ``ttl``, ``cstate``, ...) that are not ``None``."""
    stored: dict[str, str | int] = {"total": total}
    optional: dict[str, str | int | None] = {
        "role": turn.role or None,
        "open": json.dumps(turn.open, separators=(",", ":")) if turn.open else None,
        "abytes": sum(map(len, archive)) or None,
        **fields,
    }
    stored.update({name: value for name, value in optional.items() if value is not None})
    return stored


def stage_calls(
    staged: tuple[str, str, str],
    live: Sequence[bytes],
    meta: dict[str, str | int],
    archive: Sequence[bytes],
    lost: Callable[[], HistoryError],
    *,
    kept_out: Mapping[str, bytes] = MappingProxyType({}),
) -> Iterator[Call[Any]]:
    """The calls that write the staging keys ``staged`` (list, meta hash, archive, as
    :meth:`ConversationKeys.restoring` names them): the meta hash, the blobs ``kept_out``
    (:mod:`redis_history.store.blobs`) at most ``MAX_WRITE_BLOB_BYTES`` a call, then the
    archive and the live envelopes in chunks. A call that finds its list lost (expired)
    raises ``lost()``."""
    staged_msgs, staged_meta, staged_archive = staged
    fields = [part for pair in meta.items() for part in pair]
    args: tuple[Any, ...] = (STAGE_TTL_MS, -1, *fields)
    yield _call(lambda _reply: None, "stage", (staged_meta,), args, waits=False)
    batch: list[Any] = []
    size = 0
    for name, data in (*kept_out.items(), ("", b"")):  # a last, empty one sends the rest
        if batch and (not name or size + len(data) > MAX_WRITE_BLOB_BYTES):
            args = (STAGE_TTL_MS, -1, *batch)
            yield _call(lambda _reply: None, "stage", (staged_meta,), args, waits=False)
            batch, size = [], 0
        if name:
            batch += [blobs.FIELD + name, data]
            size += len(data)
    for key, envelopes in ((staged_archive, archive), (staged_msgs, live)):
        length = 0
        for chunk in chunks(envelopes):
            pushed = length + len(chunk)
            args = (STAGE_TTL_MS, length, *chunk)
            yield _call(partial(_pushed, pushed, lost), "stage", (key,), args, waits=False)
            length = pushed


def _pushed(expected: int, lost: Callable[[], HistoryError], reply: Any) -> None:
    if int(reply) != expected:
        raise lost()


def restore_call(
    keys: ConversationKeys,
    staged: tuple[str, str, str],
    *,
    replace: bool,
    live: int,
    archived: int,
    ttl_ms: int,
    op: bytes,
) -> Call[int]:
    """The script that renames the staging keys over ``keys``'s, once per ``op``: its reply is
    1 when done, 0 when the conversation exists and ``replace`` is false, -1 when the staged
    copy is not complete (nothing written either way)."""
    return _call(
        int,
        "restore",
        (*keys.data, keys.lock, keys.summaries, *staged),
        (int(replace), live, archived, ttl_ms, op),
    )
