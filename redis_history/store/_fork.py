"""A fork: a new conversation that starts as a prefix of another, copied at one version.

The two conversations have different hash tags, so on a Redis Cluster they live in different
slots and no one script can touch both. The fork is therefore two atomic halves:

1. **Read, on the source's slot.** ``lua/read_prefix-3.lua`` reads the live list from its
   head up to and including the message ``at``, a bounded chunk per call, then the archive
   likewise. The first read notes the conversation's ``version``, which every rewrite
   (replace, splice, truncate, rollback, an import over it) bumps; every later read refuses
   unless the version is the same and the live entry last read is still at its position,
   byte for byte (a conversation deleted and written again starts at the same version).
   Appends only add after the entries read, so reads that pass
   the fence hold one version's prefix; when a read is refused, the fork reads again from
   the head (:data:`READ_ATTEMPTS` times). Most prefixes take one read: one instant.
2. **Write, on the target's slot.** The copy is staged under the target's hash tag and put
   in place by one script that refuses when the target exists
   (``store/staging.py``, ``lua/restore-8.lua``): readers of the target see nothing, then
   all of it.

Between the halves the core checks the prefix: ``at`` must be a live message, and (when the
history validates) the prefix must not end with tool calls unanswered, since their results
would stay with the source. The new conversation's meta hash is rebuilt from the prefix:
its token total and turn state, the baseline the model reported when it still applies, the
source's TTL, a fresh compaction state and no records of writes.

What is copied per conversation: the live list up to ``at``, the archive (so the fork's
transcript is the source's record up to ``at``), the accounting, and the data of content
parts the copied messages name (:mod:`redis_history.store.blobs`), read after the lists
with an ``HMGET`` per 20 MiB that reads the version too: a blob never changes, and only a
rewrite (which bumps the version) or a delete removes one, so one missing at another
version makes the fork read again, and one missing at the version read is a
``CorruptHistoryError``. The fork counts the blobs its entries' heads name, as the scripts
do, and keeps uncounted those an entry written before blobs were counted names (pinned,
as in the source). A key added to a conversation later is copied the same way: read on
the source's slot by a fenced script (the version fence covers it if every write of it
bumps the version or only adds), staged under the target's tag beside the others, and
renamed with them by the final script. The HistoryManager's shared summaries, the compaction lock
and claim, and long-term memories are not copied: they belong to the source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from redis_history.errors import (
    ConversationExistsError,
    CorruptHistoryError,
    HistoryError,
    MessageNotFoundError,
    StaleSnapshotError,
    ToolPairingError,
)
from redis_history.limits import MAX_BATCH_MESSAGES
from redis_history.parts import blob_data
from redis_history.roles import RoleState
from redis_history.store import blobs
from redis_history.store.codec import Entry, decode_entries
from redis_history.store.core import HistoryCore, _call, _json_id
from redis_history.store.staging import meta_hash, restore_call, stage_calls
from redis_history.wire.call import Call
from redis_history.wire.twins import On

__all__ = ["READ_ATTEMPTS", "fork_steps"]

READ_ATTEMPTS = 5
"""How many times a fork reads a source that rewrites keep changing before it gives up."""


@dataclass(frozen=True, slots=True)
class _Read:
    """One reply of ``lua/read_prefix-3.lua``."""

    version: int
    ttl_ms: int
    baseline: int | None
    mark: int | None
    archive_dropped: int
    archived: int
    found: int
    after: int
    envelopes: list[bytes]


@dataclass(frozen=True, slots=True)
class _Prefix:
    """What a fork copies, read at one version."""

    first: _Read
    live: list[bytes]
    archive: list[bytes]


def fork_steps(
    source: HistoryCore, target: HistoryCore, at: str, via: object
) -> Generator[Call[Any] | On, Any, None]:
    """The steps of a fork of ``source`` up to and including message ``at`` into ``target``,
    for a front end to run: it sends back each call's result (or throws its error). The
    source's calls are yielded as they are, the target's as ``On(via, call)``, ``via``
    being the target's front end.

    Raises (into the front end):
        ConversationExistsError: the target exists; nothing was written.
        MessageNotFoundError: ``at`` is not a live message of the source.
        ToolPairingError: the prefix would end with tool calls unanswered.
        HistoryError: rewrites changed the source during every read, or the staged copy
            was lost before it was put in place; nothing was written.
    """
    at_json = _json_id(at)
    if (yield On(via, Call(lambda reply: int(reply) > 0, ("EXISTS", *target.keys.data)))):
        raise _exists(target)
    for _ in range(READ_ATTEMPTS):
        try:
            prefix = yield from _read(source, at, at_json)
            entries, kept_out = yield from _pieces(source, prefix)
        except StaleSnapshotError:
            continue  # rewritten between two reads: read that version from the head
        break
    else:
        raise source._context(
            HistoryError(
                f"the conversation was rewritten during each of {READ_ATTEMPTS} reads of the "
                "fork; nothing was written: fork again"
            )
        )
    turn = RoleState.of(entry.message for entry in entries)
    if source.validate and turn.open:
        raise source._context(
            ToolPairingError(
                f"a fork at {at!r} would part tool calls {', '.join(turn.open)} from their "
                "results: fork at a message that leaves none unanswered",
                index=len(entries) - 1,
            )
        )
    first, total = prefix.first, sum(entry.tokens for entry in entries)
    applies = first.baseline is not None and first.mark is not None and first.mark <= total
    meta = meta_hash(
        turn,
        total,
        prefix.archive,
        baseline=first.baseline if applies else None,
        mark=first.mark if applies else None,
        ttl=first.ttl_ms or None,
        adropped=first.archive_dropped or None,
        blobs=sum(map(len, kept_out.values())) or None,
    )
    try:
        meta.update(
            blobs.records(
                prefix.live,
                prefix.archive,
                {name: len(data) for name, data in kept_out.items()},
                _pinned(prefix),
            )
        )
    except HistoryError as exc:
        raise target._context(exc) from None
    staged = target.keys.restoring(target._entropy(16).hex())

    def lost() -> HistoryError:
        return target._context(
            HistoryError(
                "the fork's staged copy was gone before it was put in place (expired or "
                "deleted); nothing was written: fork again"
            )
        )

    try:
        for call in stage_calls(staged, prefix.live, meta, prefix.archive, lost, kept_out=kept_out):
            yield On(via, call)
        restore = restore_call(
            target.keys,
            staged,
            replace=False,
            live=len(prefix.live),
            archived=len(prefix.archive),
            ttl_ms=first.ttl_ms,
            op=target._fresh(),
        )
        done = yield On(via, restore)
    except GeneratorExit:
        raise
    except BaseException:
        with contextlib.suppress(Exception):  # else they expire by themselves
            yield On(via, Call(lambda _reply: None, ("UNLINK", *staged)))
        raise
    if done == 0:
        raise _exists(target)
    if done < 0:
        raise lost()


def _exists(target: HistoryCore) -> ConversationExistsError:
    return ConversationExistsError(
        "a fork's new conversation must not exist; nothing was written",
        conversation_id=target.conversation_id,
        namespace=target.namespace,
    )


def _pieces(
    source: HistoryCore, prefix: _Prefix
) -> Generator[Call[Any], Any, tuple[list[Entry], dict[str, bytes]]]:
    """The live entries of ``prefix``, and the data of the blobs its entries name, by digest.
    Read with the version (:func:`blobs.field_names`): a blob missing at a later version was
    deleted by a rewrite since the lists were read (``StaleSnapshotError``: read again)."""
    try:
        with blob_data(None) as wanted:  # the digests of data kept outside the lists
            entries = decode_entries(prefix.live)
            decode_entries(prefix.archive)
    except CorruptHistoryError as exc:
        raise source._context(exc) from exc.__cause__
    kept_out: dict[str, bytes] = {}
    for read in source.read_blobs(wanted):
        try:
            data: Mapping[str, bytes] = yield read
        except blobs.BlobMissingError as exc:
            if exc.version != prefix.first.version:
                raise StaleSnapshotError("a blob was deleted by a rewrite") from exc
            raise
        kept_out.update((blobs.named(reference), value) for reference, value in data.items())
    return entries, kept_out


def _pinned(prefix: _Prefix) -> set[str]:
    """The blobs named by an entry written before pieces were counted (its head names
    none): the fork keeps them uncounted, as the source does."""
    pinned: set[str] = set()
    for envelope in (*prefix.live, *prefix.archive):
        if b'"blob":"' in envelope and not blobs.head_names(envelope):
            with blob_data(None) as wanted:
                decode_entries([envelope])
            pinned.update(blobs.named(reference) for reference in wanted)
    return pinned


def _read(source: HistoryCore, at: str, at_json: bytes) -> Generator[Call[Any], Any, _Prefix]:
    """Read the live list up to ``at``, then the archive, every read after the first fenced
    on what the first saw (``StaleSnapshotError`` when the fence does not hold)."""
    first: _Read = yield _read_call(source, "live", 0, at_json, None)
    read, live = first, list(first.envelopes)
    while read.found < 0:
        if read.after < 0:
            raise source._context(MessageNotFoundError(f"no live message has id {at!r}"))
        fence = (first.version, read.after - 1, live[-1])
        read = yield _read_call(source, "live", read.after, at_json, fence)
        live += read.envelopes
    fence, archive, start = (first.version, len(live) - 1, live[-1]), [], 0
    while start < first.archived:
        chunk: _Read = yield _read_call(source, "archive", start, at_json, fence)
        archive += chunk.envelopes
        start = first.archived if chunk.after < 0 else chunk.after
    return _Prefix(first, live, archive)


def _read_call(
    source: HistoryCore,
    which: str,
    start: int,
    at_json: bytes,
    fence: tuple[int, int, bytes] | None,
) -> Call[_Read]:
    """A read of ``which`` list from ``start``, fenced on ``(version, position, entry)``."""
    version, position, entry = fence or (-1, -1, b"")
    keys = (source.keys.msgs, source.keys.meta, source.keys.archive)
    args = (which, start, MAX_BATCH_MESSAGES, at_json, version, position, entry)
    return _call(lambda reply: _parse(source, reply), "read_prefix", keys, args, waits=False)


def _parse(source: HistoryCore, reply: Any) -> _Read:
    head, *envelopes = reply
    if not isinstance(head, list):
        source._checked(reply)  # a refusal: {code, index, reason}
    version, ttl, baseline, mark, dropped, archived, found, after = head

    def number(raw: Any) -> int | None:
        return None if raw is None else int(raw)

    try:
        return _Read(
            int(version),
            number(ttl) or 0,
            number(baseline),
            number(mark),
            number(dropped) or 0,
            int(archived),
            int(found),
            int(after),
            envelopes,
        )
    except ValueError as exc:
        raise source._context(
            CorruptHistoryError(f"the meta hash holds a non-integer: {head!r}")
        ) from exc
