"""A conversation as a file: ``redis-history export`` and ``import``.

A dump is JSON Lines. The first line is the header: the format's name and version, where the
conversation came from, how many entries follow, and its accounting (the meta hash's token
total, baseline and mark, version, TTL, archive caps dropped, compaction state and counters).
Then one line per archived entry, oldest first, ``{"archived": <envelope>}``, then one per
live message, ``{"live": <envelope>}``, each envelope exactly as the store keeps it
(``redis_history.store.codec``: the token count, the summary flag, the message with its id,
timestamp, metadata and tool calls)::

    {"format":"redis-history-dump","version":1,"namespace":"default","conversation_id":"c",...}
    {"archived":{"t":5,"m":{"id":"...","role":"user","content":"hi","at":1795439894017}}}
    {"live":{"t":9,"s":1,"m":{"id":"...","role":"system","content":"Summary: ...",...}}}

An export reads the conversation as it is at one moment: it reads the meta hash and the
lengths before and after the messages, and reads again if a writer came in between. An
import validates the whole dump first (a bad line is a :class:`~redis_history.errors.DumpError`
naming it, and nothing is written), stages the lists and the meta hash under the
conversation's hash tag in chunks no larger than one write of the store (``MAX_BATCH_MESSAGES``
entries, ``MAX_BATCH_BYTES``), then puts them in place with one script (``lua/restore-8.lua``),
so no reader sees part of an import, on a Redis Cluster too (``redis_history.store._staging``,
which a fork shares).

What is not carried: the records of recent writes (a retry of a write made before the export
is not recognised after the import), a pending compaction claim and the compaction lock (both
belong to the deployment the conversation came from), the long-term memories stored from
the conversation (``redis_history.memory``), and the ``HistoryManager``'s shared summaries
(any the conversation had are deleted by the same script; the managers summarize again
what their requests leave out).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from redis_history.admin.target import Target, run_call
from redis_history.compaction.state import CompactionState
from redis_history.errors import (
    ConversationExistsError,
    ConversationNotFoundError,
    CorruptHistoryError,
    DumpError,
    DumpVersionError,
    HistoryError,
)
from redis_history.limits import (
    MAX_BLOB_BYTES,
    MAX_CONVERSATION_BLOB_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_PAGE,
    MAX_READ_BYTES,
    MAX_TOKENS,
    MAX_TTL_SECONDS,
)
from redis_history.models import MAX_PARTS
from redis_history.parts import stored_reads
from redis_history.roles import RoleState
from redis_history.store import blobs
from redis_history.store._core import OP_TOKEN_BYTES, Call, RedisFailure
from redis_history.store._staging import STAGE_TTL_MS, meta_hash, restore_call, stage_calls
from redis_history.store.codec import Entry, decode_entries, encode_entry
from redis_history.store.history import RedisHistory
from redis_history.store.keys import validate_name

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "READ_ATTEMPTS",
    "STAGE_TTL_MS",
    "Dump",
    "DumpMeta",
    "export_conversation",
    "import_conversation",
    "load_dump",
    "read_dump",
    "restore",
    "write_dump",
]

FORMAT = "redis-history-dump"
"""The header's ``format``."""
FORMAT_VERSION = 1
"""The dump format this module writes, and the newest it reads."""
READ_ATTEMPTS = 5
"""How many times an export reads a conversation that writers keep changing before it
gives up."""
_MAX_TTL_MS = MAX_TTL_SECONDS * 1000


@dataclass(frozen=True, slots=True)
class DumpMeta:
    """A conversation's accounting, as its meta hash holds it."""

    total: int = 0
    """Tokens of the live messages."""
    baseline: int | None = None
    """The input tokens the model last reported, if recorded since the last rewrite."""
    mark: int | None = None
    """The total when the baseline was recorded."""
    version: int = 0
    """Rewrites so far."""
    ttl_ms: int = 0
    """The conversation's sliding TTL in milliseconds, 0 for none."""
    archive_dropped: int = 0
    """Archived entries the archive's caps dropped (transcript positions count them)."""
    state: CompactionState = field(default_factory=CompactionState)
    """The compaction state."""
    compactions: int = 0
    tokens_freed: int = 0

    @property
    def token_estimate(self) -> int | None:
        """What ``token_estimate()`` answers for this accounting."""
        if not self.total:
            return None
        return (
            self.total if self.baseline is None else self.baseline + self.total - (self.mark or 0)
        )

    def to_json(self) -> dict[str, Any]:
        """The header's ``meta``."""
        return {
            "total": self.total,
            "baseline": self.baseline,
            "mark": self.mark,
            "version": self.version,
            "ttl_ms": self.ttl_ms,
            "archive_dropped": self.archive_dropped,
            "state": self.state.encode(),
            "compactions": self.compactions,
            "tokens_freed": self.tokens_freed,
        }

    @classmethod
    def from_json(cls, data: Any) -> DumpMeta:
        """The header's ``meta`` read back; ``DumpError`` for anything else."""
        if not isinstance(data, dict):
            raise DumpError("the header's meta is not an object", line=1)
        try:
            state = CompactionState.decode(_field(data, "state", str))
        except ValueError as exc:
            raise DumpError(f"the header's meta: {exc}", line=1) from None
        return cls(
            total=_number(data, "total", MAX_TOKENS * 1000),
            baseline=_number(data, "baseline", MAX_TOKENS, optional=True),
            mark=_number(data, "mark", MAX_TOKENS * 1000, optional=True),
            version=_number(data, "version", 2**53),
            ttl_ms=_number(data, "ttl_ms", _MAX_TTL_MS),
            archive_dropped=_number(data, "archive_dropped", 2**53),
            state=state,
            compactions=_number(data, "compactions", 2**53),
            tokens_freed=_number(data, "tokens_freed", 2**53),
        )

    @classmethod
    def from_hash(cls, fields: dict[bytes, bytes], where: RedisHistory) -> DumpMeta:
        """The accounting in a meta hash (``HGETALL``); ``CorruptHistoryError`` for what the
        store does not write."""

        def number(name: str) -> int | None:
            raw = fields.get(name.encode())
            return None if raw is None else int(raw)

        try:
            return cls(
                total=number("total") or 0,
                baseline=number("baseline"),
                mark=number("mark"),
                version=number("version") or 0,
                ttl_ms=number("ttl") or 0,
                archive_dropped=number("adropped") or 0,
                state=CompactionState.decode(fields.get(b"cstate")),
                compactions=number("compactions") or 0,
                tokens_freed=number("tokens_freed") or 0,
            )
        except ValueError as exc:
            raise CorruptHistoryError(
                f"the meta hash holds what the store does not write: {exc}",
                conversation_id=where.conversation_id,
                namespace=where.namespace,
            ) from None


def _field(data: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DumpError(f"the header's {name} is not a {kind.__name__}: {value!r}", line=1)
    return value


def _number(data: dict[str, Any], name: str, high: int, *, optional: bool = False) -> Any:
    value = _field(data, name, int, optional=optional)
    if value is not None and not 0 <= value <= high:
        raise DumpError(f"the header's {name} is out of range: {value}", line=1)
    return value


@dataclass(frozen=True, slots=True)
class Dump:
    """One conversation, everything an import puts back."""

    namespace: str
    """The namespace it was exported from."""
    conversation_id: str
    """Its id there."""
    live: list[Entry]
    """The live messages, in order, with their stored token counts and summary flags."""
    archive: list[Entry]
    """The archived originals, oldest first."""
    meta: DumpMeta
    exported_at: datetime

    @property
    def token_estimate(self) -> int | None:
        """The conversation's token estimate."""
        return self.meta.token_estimate

    def header(self) -> dict[str, Any]:
        """The first line of the dump."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "namespace": self.namespace,
            "conversation_id": self.conversation_id,
            "exported_at": self.exported_at.isoformat(timespec="milliseconds"),
            "messages": len(self.live),
            "archived": len(self.archive),
            "token_estimate": self.token_estimate,
            "meta": self.meta.to_json(),
        }


# -- export ------------------------------------------------------------------------------------


def read_dump(history: RedisHistory, *, attempts: int = READ_ATTEMPTS) -> Dump:
    """Everything of ``history``'s conversation, as it was at one moment.

    The meta hash and the lengths are read before and after the messages; if any writer
    came in between, all is read again.

    Raises:
        ConversationNotFoundError: the conversation has no data.
        CorruptHistoryError: a key lost or holding what the store does not write.
        HistoryError: writers changed the conversation during each of ``attempts`` reads.
    """
    for _ in range(attempts):
        before = _moment(history)
        fields, length, archived = before
        if not fields and not length and not archived:
            raise ConversationNotFoundError(
                "no such conversation",
                conversation_id=history.conversation_id,
                namespace=history.namespace,
            )
        history.token_estimate()  # refuses a conversation that lost its meta hash or list
        live = history.entries()
        archive = _archive(history, archived, fields.get(b"abytes"))
        if _moment(history) == before and len(live) == length and len(archive) == archived:
            return Dump(
                history.namespace,
                history.conversation_id,
                live,
                archive,
                DumpMeta.from_hash(fields, history),
                datetime.now(UTC),
            )
    raise HistoryError(
        f"the conversation changed during each of {attempts} attempts to read it whole; "
        "export it again when it is quieter",
        conversation_id=history.conversation_id,
        namespace=history.namespace,
    )


def _moment(history: RedisHistory) -> tuple[dict[bytes, bytes], int, int]:
    """The meta hash (every write changes it: its records of writes, its counters) and the
    two lists' lengths."""
    keys = history.keys
    try:
        with history.client.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.meta, *MOMENT_FIELDS)
            pipe.llen(keys.msgs)
            pipe.llen(keys.archive)
            values, length, archived = pipe.execute()
    except RedisFailure as exc:
        raise history.core.wrap(exc) from exc
    fields = {
        name.encode(): value for name, value in zip(MOMENT_FIELDS, values, strict=True) if value
    }
    return fields, int(length), int(archived)


MOMENT_FIELDS = (
    "total", "baseline", "mark", "version", "ttl", "adropped", "cstate", "compactions",
    "tokens_freed", "abytes", "blobs", "opa", "ops", "role", "open", "queued",
)  # fmt: skip
"""The meta fields an export reads (not its blobs, which the messages read carry)."""


def _archive(history: RedisHistory, archived: int, abytes: bytes | None) -> list[Entry]:
    """The archived entries, read a page at a time: pages sized by the archive's mean entry
    so that each holds about ``MAX_READ_BYTES``."""
    size = int(abytes) if abytes and abytes.isdigit() else 0
    page = MAX_PAGE if not size else max(1, min(MAX_PAGE, MAX_READ_BYTES * archived // size))
    entries: list[Entry] = []
    for start in range(0, archived, page):
        command = ("LRANGE", history.keys.archive, start, start + page - 1)
        call: Call[list[Entry]] = Call(lambda raw: _decode(history, raw), command)
        read = run_call(history, call)
        entries.extend(read)
    return entries


def _decode(history: RedisHistory, raw: Sequence[bytes]) -> list[Entry]:
    return history.core.decoded(functools.partial(decode_entries, where="in the archive "), raw)


DUMP_ENTRY_BYTES = MAX_MESSAGE_BYTES + 2 * MAX_BLOB_BYTES * MAX_PARTS
"""The longest entry of a dump: a message the store takes, its parts' data inline (base64)."""


def write_dump(dump: Dump, stream: IO[bytes]) -> None:
    """Write ``dump`` as JSON Lines: the header, the archived entries, the live ones."""
    stream.write(_json(dump.header()) + b"\n")
    for kind, entries in ((b"archived", dump.archive), (b"live", dump.live)):
        for entry in entries:
            line = encode_entry(entry, DUMP_ENTRY_BYTES, inline=True)
            stream.write(b'{"%s":%s}\n' % (kind, line))


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def export_conversation(target: Target, conversation_id: str, stream: IO[bytes]) -> Dump:
    """Read a conversation of ``target``'s namespace and write it to ``stream``.

    Raises:
        ConversationNotFoundError: the conversation has no data.
    """
    dump = read_dump(target.history(conversation_id))
    write_dump(dump, stream)
    return dump


# -- import ------------------------------------------------------------------------------------


def load_dump(lines: Iterable[bytes | str]) -> Dump:
    """A dump read back from its lines (a file opened in binary mode will do), checked whole.

    Raises:
        DumpVersionError: the dump is of a newer format version.
        DumpError: anything else that is not what :func:`write_dump` writes, or a message the
            store would refuse; the error names the line.
    """
    numbered = enumerate(lines, start=1)
    header = _header(next(numbered, (1, b""))[1])
    live: list[Entry] = []
    archive: list[Entry] = []
    for number, line in numbered:
        if not line.strip():
            continue
        kind, entry = _entry(line, number)
        if kind == "archived":
            if live:
                raise DumpError("an archived entry after the live ones", line=number)
            archive.append(entry)
        else:
            live.append(entry)
    counted = (header["messages"], header["archived"])
    if (len(live), len(archive)) != counted:
        raise DumpError(
            f"the header counts {counted[0]} live and {counted[1]} archived entries, the dump "
            f"holds {len(live)} and {len(archive)}: it is incomplete"
        )
    exported = header.get("exported_at")
    try:
        moment = datetime.fromisoformat(exported) if isinstance(exported, str) else None
    except ValueError:
        moment = None
    if moment is None:
        raise DumpError(f"the header's exported_at is not a time: {exported!r}", line=1)
    return Dump(
        header["namespace"],
        header["conversation_id"],
        live,
        archive,
        DumpMeta.from_json(header.get("meta")),
        moment,
    )


def _header(line: bytes | str) -> dict[str, Any]:
    header = _object(line, 1, "the header")
    if header.get("format") != FORMAT:
        raise DumpError(f"not a redis-history dump: its format is {header.get('format')!r}", line=1)
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DumpError(f"the header's version is not a format version: {version!r}", line=1)
    if version > FORMAT_VERSION:
        raise DumpVersionError(
            f"the dump is in format version {version}; this redis-history reads versions up "
            f"to {FORMAT_VERSION}: import it with a newer redis-history",
            line=1,
        )
    for name in ("namespace", "conversation_id"):
        try:
            validate_name(_field(header, name, str), name.replace("_", " "))
        except ValueError as exc:
            raise DumpError(str(exc), line=1) from None
    for name in ("messages", "archived"):
        _number(header, name, 2**53)
    return header


def _object(line: bytes | str, number: int, what: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise DumpError(f"{what} is not JSON: {exc}", line=number) from None
    if not isinstance(value, dict):
        raise DumpError(f"{what} is not a JSON object", line=number)
    return value


def _entry(line: bytes | str, number: int) -> tuple[str, Entry]:
    data = _object(line, number, "the line")
    if len(data) != 1 or next(iter(data)) not in ("archived", "live"):
        raise DumpError('an entry line holds one key, "archived" or "live"', line=number)
    ((kind, envelope),) = data.items()
    try:
        with stored_reads():  # what an export wrote, maybe before a check of today
            (entry,) = decode_entries([_json(envelope)])
        encode_entry(entry, MAX_MESSAGE_BYTES)  # what the store would refuse, refused now
    except (HistoryError, ValueError) as exc:
        raise DumpError(f"not a message the store keeps: {exc}", line=number) from None
    return kind, entry


def restore(
    target: Target, dump: Dump, conversation_id: str | None = None, *, replace: bool = False
) -> RedisHistory:
    """Put ``dump`` in ``target``'s namespace as ``conversation_id`` (the dump's own id when
    ``None``), atomically.

    Raises:
        ConversationExistsError: the conversation exists and ``replace`` is false.
        LimitExceededError: more inline data kept outside the list than a conversation
            keeps (bytes or pieces); nothing was written.
        HistoryError: the staged import was lost before it was put in place.
        StoreUnavailableError: Redis could not be reached; the conversation is as it was.
    """
    history = target.history(conversation_id or dump.conversation_id)
    live = [encode_entry(entry, MAX_MESSAGE_BYTES) for entry in dump.live]
    archive = [encode_entry(entry, MAX_MESSAGE_BYTES) for entry in dump.archive]
    kept_out = blobs.blobs_of(
        (entry.message for entry in (*dump.archive, *dump.live)),
        most=MAX_CONVERSATION_BLOB_BYTES,
    )
    meta = _meta_hash(dump, archive, kept_out)
    sizes = {name: len(data) for name, data in kept_out.items()}
    meta.update(blobs.records(live, archive, sizes, pinned=set()))
    client, keys = target.client, history.keys
    try:
        if not replace and client.exists(*keys.data):
            raise _exists(history)
        staged = keys.restoring(uuid.uuid4().hex)
        try:
            _stage(history, staged, live, meta, archive, kept_out=kept_out)
            call = restore_call(
                keys,
                staged,
                replace=replace,
                live=len(live),
                archived=len(archive),
                ttl_ms=dump.meta.ttl_ms,
                op=os.urandom(OP_TOKEN_BYTES),
            )
            done = run_call(history, call)
        except BaseException:
            with contextlib.suppress(*RedisFailure):  # else they expire by themselves
                client.delete(*staged)
            raise
    except RedisFailure as exc:
        raise history.core.wrap(exc) from exc
    if done == 0:
        raise _exists(history)
    if done < 0:
        raise _lost(history)
    return history


def _lost(history: RedisHistory) -> HistoryError:
    return HistoryError(
        "the import's staged data was gone before it was put in place (expired or "
        "deleted); nothing was written: import again",
        conversation_id=history.conversation_id,
        namespace=history.namespace,
    )


def _exists(history: RedisHistory) -> ConversationExistsError:
    return ConversationExistsError(
        "the conversation exists: import with replace (--replace) to overwrite it",
        conversation_id=history.conversation_id,
        namespace=history.namespace,
    )


def _meta_hash(
    dump: Dump, archive: Sequence[bytes], kept_out: Mapping[str, bytes]
) -> dict[str, str | int]:
    """The meta hash the import writes: the dump's accounting, the turn state of its live
    messages, the archive's size as written, and the bytes of the blobs (``_stage`` writes
    them)."""
    meta = dump.meta
    return meta_hash(
        RoleState.of(entry.message for entry in dump.live),
        meta.total,
        archive,
        baseline=meta.baseline,
        mark=meta.mark if meta.baseline is not None else None,
        version=meta.version or None,
        ttl=meta.ttl_ms or None,
        adropped=meta.archive_dropped or None,
        cstate=meta.state.encode() if meta.state != CompactionState() else None,
        compactions=meta.compactions or None,
        tokens_freed=meta.tokens_freed or None,
        blobs=sum(map(len, kept_out.values())) or None,
    )


def _stage(
    history: RedisHistory,
    staged: tuple[str, str, str],
    live: Sequence[bytes],
    meta: dict[str, str | int],
    archive: Sequence[bytes],
    *,
    kept_out: Mapping[str, bytes],
) -> None:
    """Write the staging keys, each call within one write's limits, each key expiring."""
    for call in stage_calls(staged, live, meta, archive, lambda: _lost(history), kept_out=kept_out):
        run_call(history, call)


def import_conversation(
    target: Target,
    stream: Iterable[bytes | str],
    conversation_id: str | None = None,
    *,
    replace: bool = False,
) -> tuple[Dump, RedisHistory]:
    """Read a dump from ``stream`` and restore it in ``target``'s namespace (see
    :func:`load_dump` and :func:`restore`)."""
    dump = load_dump(stream)
    return dump, restore(target, dump, conversation_id, replace=replace)
