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
so no reader sees part of an import, on a Redis Cluster too (``redis_history.store.staging``,
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
import math
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import takewhile
from typing import IO, Any

from pydantic import ValidationError
from pydantic_core import from_json, to_json

from redis_history.admin.target import Target, run_call
from redis_history.compaction_state import CompactionState
from redis_history.errors import (
    ConversationExistsError,
    ConversationNotFoundError,
    CorruptHistoryError,
    DumpError,
    DumpVersionError,
    HistoryError,
    InvalidMessageError,
    LimitExceededError,
    RoleOrderError,
)
from redis_history.limits import (
    MAX_BLOB_BYTES,
    MAX_CONVERSATION_BLOB_BYTES,
    MAX_CONVERSATION_BLOBS,
    MAX_MESSAGE_BYTES,
    MAX_TOKENS,
    MAX_TTL_SECONDS,
)
from redis_history.models import MAX_NESTING, MAX_PARTS
from redis_history.parts import stored_reads
from redis_history.roles import RoleState
from redis_history.store import blobs
from redis_history.store.codec import Entry, decode_entries, encode_entry
from redis_history.store.core import MAX_STATE_VALUE, OP_TOKEN_BYTES
from redis_history.store.history import RedisHistory
from redis_history.store.keys import validate_name
from redis_history.store.staging import STAGE_TTL_MS, meta_hash, restore_call, stage_calls
from redis_history.wire import RedisFailure

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_COUNT",
    "READ_ATTEMPTS",
    "STAGE_TTL_MS",
    "Dump",
    "DumpMeta",
    "check_dump",
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
MAX_COUNT = 10**12
"""The largest counter a dump's header may hold (``version``, ``archive_dropped``,
``compactions``, ``tokens_freed``). The scripts write counters back through Lua's number
formatting, which writes an integer as such only below 10**14: this leaves them room to
grow a hundredfold."""
_MAX_TTL_MS = MAX_TTL_SECONDS * 1000
_STATE_VALUES = {
    "ready": (0, 0),
    "compacted": (0, MAX_STATE_VALUE),
    "cooling": (1, MAX_STATE_VALUE),
    "exhausted": (0, 1),
}
"""The values each kind of compaction state can hold (``redis_history.compaction_state``)."""


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
        """The header's ``meta`` read back and checked (:meth:`check`); ``DumpError`` for
        anything else."""
        if not isinstance(data, dict):
            raise DumpError("the header's meta is not an object", line=1)
        _known(data, _META_FIELDS, "the header's meta")
        encoded = _field(data, "state", str)
        try:
            state = CompactionState.decode(encoded)
        except ValueError as exc:
            raise DumpError(f"the header's meta: {exc}", line=1) from None
        meta = cls(
            total=_field(data, "total", int),
            baseline=_field(data, "baseline", int, optional=True),
            mark=_field(data, "mark", int, optional=True),
            version=_field(data, "version", int),
            ttl_ms=_field(data, "ttl_ms", int),
            archive_dropped=_field(data, "archive_dropped", int),
            state=state,
            compactions=_field(data, "compactions", int),
            tokens_freed=_field(data, "tokens_freed", int),
        )
        meta.check()
        return meta

    def check(self) -> None:
        """Raise ``DumpError`` (naming the header's line) unless the store could hold this
        accounting: each number an integer within its limit, a baseline and its mark
        together (recorded at once, dropped at once by a rewrite), the mark at most the
        total (between the two only appends come, which add to it), and a compaction
        state the state machine reaches."""
        limits = (
            ("total", self.total, MAX_TOKENS),
            ("baseline", self.baseline, MAX_TOKENS),
            ("mark", self.mark, MAX_TOKENS),
            ("version", self.version, MAX_COUNT),
            ("ttl_ms", self.ttl_ms, _MAX_TTL_MS),
            ("archive_dropped", self.archive_dropped, MAX_COUNT),
            ("compactions", self.compactions, MAX_COUNT),
            ("tokens_freed", self.tokens_freed, MAX_COUNT),
        )
        for name, value, high in limits:
            if value is None and name in ("baseline", "mark"):
                continue
            if type(value) is not int or not 0 <= value <= high:
                raise DumpError(
                    f"the header's {name} is {value!r}, not an integer from 0 to {high:,}", line=1
                )
        if (self.baseline is None) != (self.mark is None):
            raise DumpError(
                "the header has a baseline without its mark, or a mark without its baseline: "
                "the store records both at once",
                line=1,
            )
        if self.mark is not None and self.mark > self.total:
            raise DumpError(
                f"the header's mark ({self.mark:,}) is over its total ({self.total:,}): the "
                "total when the baseline was recorded, it has only grown since",
                line=1,
            )
        state = self.state
        low, high = _STATE_VALUES.get(getattr(state, "kind", ""), (1, 0))
        value = getattr(state, "value", None)
        if type(value) is not int or not low <= value <= high:
            shown = state.encode() if isinstance(state, CompactionState) else state
            raise DumpError(f"the header's state {shown!r} is not one compaction reaches", line=1)

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


_META_FIELDS = (
    "total", "baseline", "mark", "version", "ttl_ms", "archive_dropped", "state",
    "compactions", "tokens_freed",
)  # fmt: skip
_HEADER_FIELDS = (
    "format", "version", "namespace", "conversation_id", "exported_at", "messages",
    "archived", "token_estimate", "meta",
)  # fmt: skip
_KINDS = {int: "an integer", str: "a string"}


def _field(data: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DumpError(f"the header's {name} is not {_KINDS[kind]}: {value!r}", line=1)
    return value


def _number(data: dict[str, Any], name: str, high: int, *, optional: bool = False) -> Any:
    value = _field(data, name, int, optional=optional)
    if value is not None and not 0 <= value <= high:
        raise DumpError(f"the header's {name} is out of range: {value}", line=1)
    return value


def _known(data: dict[str, Any], names: Sequence[str], what: str) -> None:
    """Refuse fields the format does not have: a reader that dropped them would lose what
    they hold."""
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise DumpError(
            f"{what} holds fields format version {FORMAT_VERSION} does not have: "
            + ", ".join(map(repr, unknown)),
            line=1,
        )


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
        archive = _archive(history)
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


def _archive(history: RedisHistory) -> list[Entry]:
    """The archived entries, read in pages as the live ones are (``store/_pages.py``)."""
    call = history.core.listing(history.keys.archive, lambda raw: _decode(history, raw))
    return run_call(history, call)


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


def load_dump(lines: Iterable[bytes | str], *, validate: bool = True) -> Dump:
    """A dump read back from its lines (a file opened in binary mode will do), checked whole
    (:func:`check_dump`).

    Args:
        lines: the dump's lines.
        validate: check the live messages' role order and tool pairing; ``False`` for a
            conversation written with ``validate=False``, whose messages need not follow
            them (everything else is checked either way).

    Raises:
        DumpVersionError: the dump is of a newer format version.
        DumpError: anything else that is not what :func:`write_dump` writes, or what the
            store would refuse; the error names the line.
    """
    numbered = enumerate(lines, start=1)
    header = _header(next(numbered, (1, b""))[1])
    meta = DumpMeta.from_json(header.get("meta"))
    estimate = header.get("token_estimate")
    if isinstance(estimate, bool) or estimate != meta.token_estimate:
        raise DumpError(
            f"the header's token_estimate is {estimate!r}; its meta gives {meta.token_estimate!r}",
            line=1,
        )
    live: list[Entry] = []
    archive: list[Entry] = []
    where: list[int] = []
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
        where.append(number)
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
    dump = Dump(header["namespace"], header["conversation_id"], live, archive, meta, moment)
    _checked(dump, validate=validate, line=where.__getitem__)
    return dump


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
    _known(header, _HEADER_FIELDS, "the header")
    for name in ("namespace", "conversation_id"):
        try:
            validate_name(_field(header, name, str), name.replace("_", " "))
        except ValueError as exc:
            raise DumpError(str(exc), line=1) from None
    for name in ("messages", "archived"):
        _number(header, name, 2**53)
    return header


def _object(line: bytes | str, number: int, what: str) -> dict[str, Any]:
    """A line's JSON object. pydantic-core's parser, not ``json.loads``, which recurses and
    raises ``RecursionError`` on deep text: this one stops at its own limit, past
    ``MAX_NESTING``, with a ``ValueError``; and it keeps integers exact, which ``orjson``
    would not past 64 bits."""
    try:
        value = from_json(line.encode() if isinstance(line, str) else line, allow_inf_nan=False)
    except UnicodeEncodeError:
        raise DumpError(
            f"{what} holds a lone surrogate, which UTF-8 cannot encode", line=number
        ) from None
    except (ValueError, TypeError) as exc:  # TypeError: not text
        if "recursion limit" in str(exc):
            raise DumpError(
                f"{what} nests deeper than any message the store keeps "
                f"(MAX_NESTING = {MAX_NESTING} levels)",
                line=number,
            ) from None
        raise DumpError(f"{what} is not JSON: {exc}", line=number) from None
    if not isinstance(value, dict):
        raise DumpError(f"{what} is not a JSON object", line=number)
    if not _finite(value):
        raise DumpError(f"{what} holds a number too large for a double (e.g. 1e400)", line=number)
    return value


def _finite(value: Any) -> bool:
    """Whether no float in ``value`` (parsed JSON) is infinite: the parser reads 1e400 as
    one. A walk one level at a time, so no depth can exhaust the stack."""
    level = [value]
    while level:
        deeper: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                deeper += node.values()
            elif isinstance(node, list):
                deeper += node
            elif isinstance(node, float) and not math.isfinite(node):
                return False
        level = deeper
    return True


def _entry(line: bytes | str, number: int) -> tuple[str, Entry]:
    data = _object(line, number, "the line")
    if len(data) != 1 or next(iter(data)) not in ("archived", "live"):
        raise DumpError('an entry line holds one key, "archived" or "live"', line=number)
    ((kind, envelope),) = data.items()
    try:
        with stored_reads():  # what an export wrote, maybe before a check of today
            (entry,) = decode_entries([to_json(envelope)])
        encode_entry(entry, MAX_MESSAGE_BYTES)  # what the store would refuse, refused now
    except (HistoryError, ValueError) as exc:
        raise DumpError(f"not a message the store keeps: {_reason(exc)}", line=number) from None
    return kind, entry


def _reason(exc: Exception) -> str:
    """What was wrong with an entry: the first error of the validation behind a refused
    read, or the refusal (made of one message, a batch of one: its index says nothing)."""
    cause = exc.__cause__
    if isinstance(cause, ValidationError) and (errors := cause.errors(include_url=False)):
        where = ".".join(map(str, errors[0]["loc"]))
        return f"{where + ': ' if where else ''}{errors[0]['msg']}"
    return str(exc).replace(" at index 0", "")


def check_dump(dump: Dump, *, validate: bool = True) -> None:
    """Raise ``DumpError`` unless ``restore`` may write ``dump``: unless every later call
    of the store accepts the conversation it would be.

    What is checked: the names; the accounting (:meth:`DumpMeta.check`); each entry's
    token count at most ``MAX_TOKENS``, and the live ones' adding up to the header's total
    (``MAX_TOKENS`` at most); the live messages' role order and tool pairing as the store's
    writes leave them (:mod:`redis_history.roles`, by the lenient rules, which take what
    writes by either rules leave; not with ``validate=False``): the
    summaries at the head (what ``splice_prefix`` wrote) for tool pairing only, as the
    splice checks them, the message after them for tool pairing too and to be no system
    message (a splice may cut a turn anywhere), every later one for both; and the parts'
    inline data within ``MAX_BLOB_BYTES`` each, and ``MAX_CONVERSATION_BLOB_BYTES`` and
    ``MAX_CONVERSATION_BLOBS`` pieces in all.
    :func:`load_dump` has checked each message as an append checks it; :func:`restore`
    encodes each again. An error names the line the entry would have in a dump.
    """
    _checked(dump, validate=validate, line=lambda position: position + 2)


def _checked(dump: Dump, *, validate: bool, line: Callable[[int], int]) -> dict[str, bytes]:
    """:func:`check_dump`, ``line`` giving each entry's line (archived, then live); the
    data the store keeps outside the list, by digest."""
    for name, what in ((dump.namespace, "namespace"), (dump.conversation_id, "conversation id")):
        try:
            validate_name(name, what)
        except ValueError as exc:
            raise DumpError(str(exc), line=1) from None
    if not isinstance(dump.meta, DumpMeta):
        raise DumpError(f"the accounting is not a DumpMeta: {type(dump.meta).__name__}", line=1)
    dump.meta.check()
    entries = [*dump.archive, *dump.live]
    total = 0
    for position, entry in enumerate(entries):
        if not isinstance(entry, Entry):
            raise DumpError(f"not an entry: {type(entry).__name__}", line=line(position))
        if entry.tokens > MAX_TOKENS:
            raise DumpError(
                f"a token count of {entry.tokens:,} is over MAX_TOKENS = {MAX_TOKENS:,}, "
                "the most the store records",
                line=line(position),
            )
        if position >= len(dump.archive):
            total += entry.tokens
            if total > MAX_TOKENS:
                raise DumpError(
                    f"the live entries' token counts add up to more than MAX_TOKENS = "
                    f"{MAX_TOKENS:,}, the most the store records",
                    line=line(position),
                )
    if total != dump.meta.total:
        raise DumpError(
            f"the header's total is {dump.meta.total:,}; the live entries' token counts add "
            f"up to {total:,}",
            line=1,
        )
    if validate:
        _check_turns(dump.live, lambda index: line(len(dump.archive) + index))
    return _kept_out(entries, line)


def _check_turns(live: Sequence[Entry], line: Callable[[int], int]) -> None:
    """Raise ``DumpError`` unless the live messages follow the rules as the store's writes
    leave them (see :func:`check_dump`)."""
    lead = sum(1 for _ in takewhile(lambda entry: entry.summary, live))
    state = RoleState()
    for index, entry in enumerate(live):
        message = entry.message
        try:
            if lead and index == lead and message.role == "system":
                raise RoleOrderError("a system message may only come first, not after summaries")
            state.advance(message, pairing_only=bool(lead) and index <= lead, roles="lenient")
        except InvalidMessageError as exc:
            raise DumpError(f"{exc.message}: the store refuses that", line=line(index)) from None


def _kept_out(entries: Sequence[Entry], line: Callable[[int], int]) -> dict[str, bytes]:
    """The inline data the store keeps outside the list, by digest, each piece once; a
    ``DumpError`` naming the line where a part's passes ``MAX_BLOB_BYTES``, all of it
    ``MAX_CONVERSATION_BLOB_BYTES`` or its pieces ``MAX_CONVERSATION_BLOBS``."""
    kept: dict[str, bytes] = {}
    size = 0
    for position, entry in enumerate(entries):
        if not entry.message.parts:
            continue
        try:
            found = blobs.blobs_of([entry.message], most=MAX_CONVERSATION_BLOB_BYTES)
        except LimitExceededError as exc:
            raise DumpError(exc.message.replace(" at index 0", ""), line=line(position)) from None
        for name, data in found.items():
            if name not in kept:
                kept[name] = data
                size += len(data)
        if size > MAX_CONVERSATION_BLOB_BYTES:
            raise DumpError(
                f"the parts' inline data comes to {size:,} bytes; a conversation keeps at most "
                f"MAX_CONVERSATION_BLOB_BYTES = {MAX_CONVERSATION_BLOB_BYTES:,}",
                line=line(position),
            )
        if len(kept) > MAX_CONVERSATION_BLOBS:
            raise DumpError(
                f"the parts' inline data comes to {len(kept):,} pieces; a conversation counts "
                f"at most MAX_CONVERSATION_BLOBS = {MAX_CONVERSATION_BLOBS:,}",
                line=line(position),
            )
    return kept


def restore(
    target: Target,
    dump: Dump,
    conversation_id: str | None = None,
    *,
    replace: bool = False,
    validate: bool = True,
) -> RedisHistory:
    """Put ``dump`` in ``target``'s namespace as ``conversation_id`` (the dump's own id when
    ``None``), atomically, once :func:`check_dump` has passed it (``validate`` as there).

    Raises:
        DumpError: what :func:`check_dump` refuses; nothing was written.
        ConversationExistsError: the conversation exists and ``replace`` is false.
        HistoryError: the staged import was lost before it was put in place.
        StoreUnavailableError: Redis could not be reached; the conversation is as it was.
    """
    kept_out = _checked(dump, validate=validate, line=lambda position: position + 2)
    history = target.history(conversation_id or dump.conversation_id)
    live = [encode_entry(entry, MAX_MESSAGE_BYTES) for entry in dump.live]
    archive = [encode_entry(entry, MAX_MESSAGE_BYTES) for entry in dump.archive]
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
    validate: bool = True,
) -> tuple[Dump, RedisHistory]:
    """Read a dump from ``stream`` and restore it in ``target``'s namespace (see
    :func:`load_dump` and :func:`restore`)."""
    dump = load_dump(stream, validate=validate)
    return dump, restore(target, dump, conversation_id, replace=replace, validate=validate)
