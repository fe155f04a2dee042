"""The sans-IO core shared by the sync and asyncio histories.

Each operation is a :class:`Call`: which script or command to run, with which
keys and arguments, and how to turn Redis's reply into a result or a typed
error. The front ends (``store/history.py``) only execute calls, so no method's
logic exists twice. The core sends nothing (``wire/lane.py`` sends a call),
reads no clock and draws no random bytes (the front ends hand it a
:data:`Clock` and an :data:`Entropy`), and logs nothing (``maybe_compact``
yields its warning to the front end). What it reads is configuration: the Lua
sources, once per process (``wire/scripts.py``), and a token counter named by
a dotted path.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar, get_args

from pydantic_core import PydanticSerializationError, to_json

from redis_history import limits
from redis_history.compaction_policy import CompactionFacts, CompactionPolicy
from redis_history.compaction_state import CompactionState, Event
from redis_history.errors import (
    CorruptHistoryError,
    HistoryError,
    InvalidMessageError,
    InvalidTransitionError,
    ReplicationError,
)
from redis_history.models import MAX_ID_LENGTH, Message
from redis_history.parts import BlobsWanted, blob_data, blobs_at_hand
from redis_history.redact import Redactor
from redis_history.store import blobs
from redis_history.store._pages import (
    LENGTHS,
    READ_ATTEMPTS,
    Complete,
    Listing,
    PagesWanted,
    Rest,
)
from redis_history.store.codec import (
    Batch,
    Entry,
    decode_entries,
    decode_messages,
    decode_openai,
    encode_batch,
    encode_message,
    read_size,
    role_item,
)
from redis_history.store.keys import (
    DEFAULT_NAMESPACE,
    ConversationKeys,
    job_id_prefix,
)
from redis_history.store.options import DEFAULT_MAX_MESSAGE_BYTES, HistoryOptions
from redis_history.tokens import Pricer
from redis_history.turns import Turn, group_entries
from redis_history.wire.call import Call
from redis_history.wire.failures import RedisFailure, redis_error
from redis_history.wire.scripts import ERRORS, refusal, script

__all__ = [
    "APPENDS_DROPPED",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "NOTHING_TO_SEND",
    "OPS_KEPT",
    "PARTLY_REMOVED",
    "SMALL_BATCH",
    "STAGE_BYTES",
    "Clock",
    "CompactionRequest",
    "CompactionStats",
    "Entropy",
    "HistoryCore",
    "Schedule",
    "Splice",
    "Step",
    "TranscriptPage",
    "TranscriptPages",
    "batch_of",
    "ids_of",
    "op_token",
    "rollback_ids",
    "write_token",
]

T = TypeVar("T")

EVENTS: tuple[str, ...] = get_args(Event)
"""The compaction-state events a write may apply."""

Clock = Callable[[], int]
"""Milliseconds since the epoch, now."""
Entropy = Callable[[int], bytes]
"""``n`` random bytes (``os.urandom``)."""


OPS_KEPT = 32
"""How many recent writes of each kind a conversation remembers, at least (``OPS_KEPT`` in
``lua/includes/ring.lua``): appends, and all other writes, are remembered apart. A retried
write is recognised, and not applied again, while fewer than this many other writes of its
kind have reached the conversation since."""

APPENDS_DROPPED = 8
"""How many of the oldest appends a conversation forgets at once, when one more would make
it remember more than ``OPS_KEPT + APPENDS_DROPPED - 1`` (``lua/includes/ring.lua``): so an
append rarely makes a trimmed copy of the records."""

PARTLY_REMOVED = (
    "a rollback or a truncate removed part of this batch since it was appended, so appending "
    "it again would repeat the rest: append the removed messages as a new batch"
)
"""Why an append is refused whose batch a rollback or a truncate cut (``PARTLY_REMOVED`` in
``lua/includes/ring.lua``): a rewrite that removes all of a batch's messages makes it new
again, one that removes part of it leaves the batch applied and refused."""

SMALL_BATCH = 32
"""The most messages one append sends to ``lua/append_small-4.lua`` (a turn, or a few): a
longer batch goes to ``lua/append-5.lua``, whose walk looks open calls up in a table and
which pushes in chunks."""

_SPANS = tuple(n.to_bytes(2, "big") for n in range(SMALL_BATCH + 1))


def span(n: int) -> bytes:
    """A batch's size as the append scripts take it: the 2-byte span its operation record
    ends with (``lua/includes/ring.lua``), which they write as sent, with no Lua call."""
    return _SPANS[n] if n <= SMALL_BATCH else n.to_bytes(2, "big")


STAGE_BYTES = 12 * 1024
"""An append whose envelopes hold at least this many bytes is staged (``Call.staged``):
its envelopes are pushed by a plain ``RPUSHX`` in a transaction with the script, not
passed through Lua, which costs Redis about a microsecond per kilobyte of arguments.
Smaller ones go as one script, which is cheaper than a transaction's extra commands: with
the short appends' script, 4-12 KiB envelopes took 7-19 µs less unstaged
(docs/benchmarks.md)."""


def _fenced(listing: Listing, rest: Rest | None) -> Generator[Call[Any], Any, list[Any]]:
    """The entries of a read in pages: the length and the first pages (unless ``rest``
    holds them), then the rest; ``PagesWanted`` when the fence failed."""
    if rest is None:
        try:
            return listing.read((yield Call(_raw, listing.commands(), batch=True)))
        except PagesWanted as more:
            if more.rest is None:
                raise
            rest = more.rest
    return rest.joined((yield Call(_raw, rest.commands(), batch=True)))


def _raw(reply: Any) -> Any:
    """A reply as it came (a read made again, parsed by its plan)."""
    return reply


_MULTI, _EXEC = ("MULTI",), ("EXEC",)
_NO_BLOBS = (0,)
"""The blobs section of a write that keeps no inline data outside the list."""


@dataclass(frozen=True, slots=True)
class TranscriptPage:
    """A page of the full record (archived originals, then live messages, no summaries)."""

    messages: list[Message]
    """The page's messages, oldest first."""
    start: int
    """The position the page was read from; later than asked when capped entries were gone."""
    next: int | None
    """Where the next page starts, or ``None`` when this page reached the end."""


def _within_read(raw: Sequence[bytes]) -> int:
    """How many of ``raw`` a page keeps: up to the first whose running :func:`read_size`
    reaches ``MAX_READ_BYTES``, so at most one entry past it is decoded."""
    read = 0
    for kept, envelope in enumerate(raw, 1):
        read += read_size(envelope)
        if read >= limits.MAX_READ_BYTES:
            return kept
    return len(raw)


class TranscriptPages:
    """Reads pages in order, dropping what the previous page gave: each summary written
    between two reads shifts the live part of the record by one position."""

    def __init__(self) -> None:
        self._previous: set[str] = set()

    def fresh(self, page: TranscriptPage) -> list[Message]:
        """The page's messages that the previous page did not already give."""
        fresh = [m for m in page.messages if m.id not in self._previous]
        self._previous = {m.id for m in page.messages}
        return fresh

    def every(self, read: Callable[[int], TranscriptPage]) -> Iterator[Message]:
        """The whole record, a page at a time from position 0, each page ``read(start)``."""
        start: int | None = 0
        while start is not None:
            page = read(start)
            yield from self.fresh(page)
            start = page.next


OP_TOKEN_BYTES = 6
"""A write's token: 48 bits, so two of a conversation's remembered writes share one with a
chance of about 2**-38 per write."""

MAX_STATE_VALUE = (1 << 24) - 1
"""The largest cooldown a compaction state holds (the scripts record a state in 32 bits)."""


def op_token(kind: str, parts: Iterable[str]) -> bytes:
    """The token a write is recorded by: the same parts, the same token. Each part goes in
    behind its length, so no two lists of parts (ids holding NUL or any other character)
    meet."""
    data = "".join([f"{len(part)}:{part}" for part in (kind, *parts)])
    return hashlib.blake2b(
        data.encode("utf-8", "surrogatepass"), digest_size=OP_TOKEN_BYTES
    ).digest()


def write_token(kind: str, op_id: str | None, otherwise: Callable[[], bytes]) -> bytes:
    """The token a write of ``kind`` is recorded by: the caller's ``op_id``'s, else
    ``otherwise()`` (a token of the write's natural key, or a fresh one)."""
    named = limits.op_id(op_id)
    return otherwise() if named is None else op_token(kind, ("id", named))


def _json_id(message_id: str) -> bytes:
    """A message id as a stored envelope spells it (what the scripts compare)."""
    if not isinstance(message_id, str) or not message_id:
        raise ValueError(f"a message id must be a non-empty string, got {message_id!r}")
    limits.limited(len(message_id), MAX_ID_LENGTH, "a message id's length")  # none is longer
    try:
        return to_json(message_id)[1:-1]
    except PydanticSerializationError:
        raise ValueError(f"message id {message_id!r} is not valid UTF-8 text") from None


def _utf8(value: str) -> bool:
    """Whether ``value`` is a non-empty string UTF-8 can encode (no lone surrogates)."""
    try:
        return isinstance(value, str) and bool(value.encode())
    except UnicodeEncodeError:
        return False


def _call(
    parse: Callable[[Any], T],
    name: str,
    keys: tuple[str, ...],
    args: tuple[Any, ...],
    *,
    waits: bool = True,
) -> Call[T]:
    """A call of script ``name``; the key count its file name declares is checked here."""
    lua = script(name)
    if len(keys) != lua.nkeys:
        raise AssertionError(f"{name} takes {lua.nkeys} keys, called with {len(keys)}")
    return Call(parse, ("EVALSHA", lua.sha, lua.nkeys, *keys, *args), lua, waits)


def lock_call(key: str, token: str, ttl_ms: int) -> Call[bool]:
    """Extend the lock at ``key`` to ``ttl_ms`` from now (0: release it) if ``token`` holds
    it; the reply is whether it did (``lua/lock-1.lua``)."""
    return _call(bool, "lock", (key,), (token, ttl_ms), waits=False)


class HistoryCore:
    """Key names, script arguments and reply decoding for one conversation."""

    def __init__(
        self,
        conversation_id: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        options: HistoryOptions,
        secrets: tuple[str, ...] = (),
        clock: Clock,
        entropy: Entropy,
    ) -> None:
        self.keys = ConversationKeys.build(conversation_id, namespace, options.prefix)
        self.conversation_id = conversation_id
        self.namespace = namespace
        self.options = options
        self.prefix = options.prefix
        self.counter = options.counter
        self._price = Pricer(self.counter)
        self.validate = options.validate
        lenient = options.roles == "lenient"
        self._check: int | str = ("l" if lenient else 1) if options.validate else 0
        """The check argument of the scripts that check role order: 1 by the strict rules,
        ``l`` by the lenient ones, 0 none."""
        self._pairing = int(options.validate)
        """The check argument of the scripts that check tool pairing only (splice, truncate)."""
        self._reopening: int | str = ("L" if lenient else 2) if options.validate else 0
        """A rollback's check argument when it lets calls reopen."""
        self.max_message_bytes = options.max_message_bytes
        self.ttl_ms = limits.ttl_ms(options.ttl)
        self.wait_replicas = options.wait_replicas
        self.wait: tuple[str, int, int] | None = (
            ("WAIT", options.wait_replicas, limits.ttl_ms(options.wait_timeout, "wait_timeout"))
            if options.wait_replicas
            else None
        )
        """The ``WAIT`` sent after every write of the data on its connection, or ``None``."""
        self._data = (*self.keys.data, self.keys.summaries)
        """The keys a write applies the conversation's TTL to, as the scripts take them."""
        self._append = script("append")
        keys = (*self.keys.data, self.keys.stage, self.keys.summaries)
        if len(keys) != self._append.nkeys:
            raise AssertionError("append takes the data keys, the stage and the summaries")
        self._append_head = ("EVALSHA", self._append.sha, self._append.nkeys, *keys)
        self._small = script("append_small")
        self._small_head = ("EVALSHA", self._small.sha, self._small.nkeys, *self._data)
        self.redactor = Redactor.of(*secrets)
        """Masks ``secrets`` (the client's password) in the errors :meth:`wrap` makes."""
        self._clock = clock
        self._entropy = entropy

    def _fresh(self) -> bytes:
        """A random operation token, for a write with no natural key."""
        return self._entropy(OP_TOKEN_BYTES)

    # -- errors -------------------------------------------------------------------------------

    def _context(self, exc: HistoryError) -> HistoryError:
        exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
        return exc

    def wrap(self, exc: Exception) -> HistoryError:
        """The typed error for a redis-py error (callers ``raise ... from exc``), redacted."""
        return self._context(redis_error(exc, self.redactor))

    def settle(self, call: Call[T], reply: Any, acknowledged: Any) -> T:
        """The result of a write sent with ``WAIT``: an error in its reply raised typed, a
        refusal raised, and then too few replicas raised as ``ReplicationError``."""
        if isinstance(reply, RedisFailure):
            raise self.wrap(reply) from reply
        result = call.parse(reply)
        self.replicated(acknowledged)
        return result

    def replicated(self, acknowledged: Any) -> None:
        """Raise ``ReplicationError`` if ``WAIT`` counted fewer replicas than required."""
        count = int(acknowledged)
        if count < self.wait_replicas:
            raise self._context(
                ReplicationError(
                    f"the write was applied, but {count} of the {self.wait_replicas} replicas "
                    f"required confirmed it within {self.wait[2] if self.wait else 0} ms",
                    acknowledged=count,
                    required=self.wait_replicas,
                )
            )

    def _checked(self, reply: Any) -> Any:
        """A script's result; a refusal (``[code, index, reason]``) raises the mapped exception."""
        if not isinstance(reply, list):
            return reply
        raise self._context(refusal(reply))

    def _decode(self, raw: Sequence[bytes | str]) -> list[Entry]:
        return self.decoded(decode_entries, raw)

    def decoded(self, decode: Callable[[Sequence[bytes | str]], list[T]], raw: Any) -> list[T]:
        """``decode(raw)``, a ``CorruptHistoryError`` carrying the conversation. Parts whose
        data is kept outside the list raise ``BlobsWanted`` with their digests, for the
        front end to read them and parse again with them (:meth:`with_blobs`)."""
        try:
            if blobs_at_hand():
                return decode(raw)
            with blob_data(None) as wanted:
                out = decode(raw)
        except CorruptHistoryError as exc:
            raise self._context(exc) from exc.__cause__
        if wanted:
            raise BlobsWanted(wanted)
        return out

    def wanted(
        self, call: Call[T], reply: Any, wanted: BlobsWanted | PagesWanted
    ) -> Generator[Call[Any], Any, T]:
        """The plan of a read whose parse of ``reply`` wanted more: blobs, or pages."""
        if isinstance(wanted, PagesWanted):
            return (yield from self.with_pages(call, wanted))
        return (yield from self.with_blobs(call, reply, wanted))

    def _parsed(self, call: Call[T], reply: Any) -> Generator[Call[Any], Any, T]:
        """``call.parse(reply)``, with the reads it asks for."""
        try:
            return call.parse(reply)
        except (BlobsWanted, PagesWanted) as wanted:
            return (yield from self.wanted(call, reply, wanted))

    def with_pages(self, call: Call[T], wanted: PagesWanted) -> Generator[Call[Any], Any, T]:
        """The plan of a read in pages whose first page did not hold the whole range: the
        fenced round trips, made again from the length when the list changed under them
        (``READ_ATTEMPTS`` reads in all); then ``call``'s parse of every entry."""
        rest = wanted.rest
        for _ in range(READ_ATTEMPTS):
            try:
                envelopes = yield from _fenced(wanted.listing, rest)
            except PagesWanted:
                rest = None
                continue
            return (yield from self._parsed(call, Complete(envelopes)))
        raise self._context(
            HistoryError(
                f"the conversation was rewritten during each of {READ_ATTEMPTS} reads of its "
                "list: read it again"
            )
        )

    def with_blobs(
        self, call: Call[T], reply: Any, wanted: BlobsWanted
    ) -> Generator[Call[Any], Any, T]:
        """The plan of a read whose parse wanted blobs: the calls reading them, then
        ``call``'s ``reply`` parsed again with their data at hand. A blob missing there was
        deleted by a rewrite since ``call`` read the entries naming it (or the conversation
        was): ``call`` is made again, ``READ_ATTEMPTS`` times in all, and then the
        ``BlobMissingError`` (a ``CorruptHistoryError``) is raised."""
        for attempt in range(1, blobs.READ_ATTEMPTS + 1):
            found: dict[str, bytes] = {}
            try:
                for read in self.read_blobs(wanted.digests):
                    found.update((yield read))
            except blobs.BlobMissingError:
                if attempt == blobs.READ_ATTEMPTS:
                    raise
                reply = yield call._replace(parse=_raw)
                try:
                    return call.parse(reply)  # its entries name no blob now
                except BlobsWanted as again:
                    wanted = again
                except PagesWanted as pages:
                    return (yield from self.with_pages(call, pages))
                continue
            with blob_data(found):
                return call.parse(reply)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def read_blobs(self, references: Iterable[str]) -> list[Call[Mapping[str, bytes]]]:
        """The calls that read the data of the blobs ``references`` name, each answering it
        by reference, checked against its digest: one ``HMGET`` per 20 MiB of it, with the
        conversation's ``version``. One missing is a ``BlobMissingError``, one altered a
        ``CorruptHistoryError``."""

        def call(names: list[str]) -> Call[Mapping[str, bytes]]:
            def parse(reply: Any) -> Mapping[str, bytes]:
                try:
                    return blobs.found(names, reply)
                except CorruptHistoryError as exc:
                    raise self._context(exc) from None

            return Call(parse, ("HMGET", self.keys.meta, *blobs.field_names(names)))

        try:
            groups = blobs.reads(references)
        except CorruptHistoryError as exc:
            raise self._context(exc) from None
        return [call(names) for names in groups]

    def _batch(self, messages: Sequence[Message], *, summary: bool = False) -> Batch:
        """``messages`` encoded for a write script, within ``MAX_BATCH_BYTES`` of what a
        reader gets back (compressed, the envelopes sent may be far fewer bytes)."""
        try:
            batch = encode_batch(messages, self._price, self.max_message_bytes, summary=summary)
            limits.limited(batch.read_bytes, limits.MAX_BATCH_BYTES, "bytes in one write")
        except HistoryError as exc:
            raise self._context(exc) from None
        return batch

    # -- writes -------------------------------------------------------------------------------

    def _none(self, reply: Any) -> None:
        if isinstance(reply, list):
            self._checked(reply)

    def _replayed(self, reply: Any) -> bool:
        """Whether an append's reply says it was applied before (``{0, length}``)."""
        if isinstance(reply, list) and reply and reply[0] == 0:
            return True
        self._checked(reply)
        return False

    def _count(self, reply: Any) -> int:
        return int(self._checked(reply))

    def append(self, messages: Sequence[Message]) -> Call[bool | None]:
        """Append ``messages`` at the tail, all or none; once per batch of message ids. The
        call answers whether the batch was a replay of one applied before (``None`` for an
        empty batch, which sends nothing). At most ``SMALL_BATCH`` messages that keep no
        data outside the list and are not staged go to ``lua/append_small-4.lua``, the rest
        to ``lua/append-5.lua``."""
        if len(messages) == 1 and isinstance(messages, list | tuple):  # most appends
            message = messages[0]
            try:
                envelope, tokens = encode_message(message, self._price, self.max_message_bytes)
                roles = role_item(message)
            except HistoryError as exc:
                raise self._context(exc) from None
            token = op_token("append", (message.id,))
            kept_out = self._blobs(messages) if message.parts else ()
            if (not kept_out or kept_out == _NO_BLOBS) and len(envelope) < STAGE_BYTES:
                return self._small_call(token, tokens, (envelope,), roles)
            return self._append_call(token, tokens, (envelope,), roles, kept_out)
        batch = self._batch(batch_of(messages))
        if not batch.envelopes:
            return NOTHING_TO_SEND
        token = op_token("append", [m.id for m in messages])
        blobs = self._blobs(messages)
        if (
            blobs == _NO_BLOBS
            and len(messages) <= SMALL_BATCH
            and sum(map(len, batch.envelopes)) < STAGE_BYTES
        ):
            return self._small_call(token, batch.tokens, batch.envelopes, batch.roles)
        return self._append_call(token, batch.tokens, batch.envelopes, batch.roles, blobs)

    def _small_call(
        self, token: bytes, tokens: int, envelopes: Sequence[bytes], roles: Sequence[str | int]
    ) -> Call[bool | None]:
        """``lua/append_small-4.lua``'s call: the envelopes, then their role items."""
        n = len(envelopes)
        command = (*self._small_head, token, self.ttl_ms, self._check, tokens, _SPANS[n])
        return Call(self._replayed, (*command, *envelopes, *roles), self._small, True)

    def _blobs(self, messages: Sequence[Message]) -> tuple[Any, ...]:
        """The blobs section of a write's arguments: how many, then the digest of each, the
        messages naming it and its data (``lua/includes/blobs.lua``)."""
        if not any(m.parts for m in messages):
            return _NO_BLOBS
        try:
            return blobs.section(messages)
        except HistoryError as exc:
            raise self._context(exc) from None

    def _append_call(
        self,
        token: bytes,
        tokens: int,
        envelopes: Sequence[bytes],
        roles: Sequence[str | int],
        kept_out: tuple[Any, ...] = (),
    ) -> Call[bool | None]:
        """The append script's call, staged when the envelopes are large; ``kept_out`` is
        the blobs section (:meth:`_blobs`), none when empty."""
        head = (*self._append_head, token, self.ttl_ms, self._check)
        section = kept_out or _NO_BLOBS
        n = len(envelopes)
        command = (*head, 0, span(n), *section, tokens, n, *envelopes, *roles)
        staged = None
        if (len(envelopes[0]) if n == 1 else sum(map(len, envelopes))) >= STAGE_BYTES:
            stage = self.keys.stage
            staged = (
                _MULTI,
                (*head, 1, span(n), *section, tokens, n, *roles),
                ("RPUSHX", stage, *envelopes),
                ("RENAME", stage, self.keys.msgs),
                _EXEC,
            )
        return Call(self._replayed, command, self._append, True, staged)

    def replace(
        self,
        messages: Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        op_id: str | None = None,
    ) -> Call[None]:
        """Replace the whole list, if it still holds ``expected_ids``; resets the baseline."""
        batch = self._batch(batch_of(messages))
        fence = _fence(ids_of(expected_ids, "expected_ids", limits.MAX_BATCH_MESSAGES))
        head = (write_token("replace", op_id, self._fresh), self.ttl_ms, self._check, *fence)
        section = self._blobs(messages)
        return _call(self._none, "replace", self._data, batch.args((*head, *section)))

    def splice_prefix(
        self,
        drop_count: int,
        summary: Message | Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        lock_token: str | None = None,
        archive_max_messages: int | None = None,
        archive_max_bytes: int | None = None,
        op_id: str | None = None,
    ) -> Call[int]:
        """Replace the first ``drop_count`` messages with ``summary``; replies how many."""
        splice = Splice.of(
            drop_count,
            summary,
            expected_ids=expected_ids,
            lock_token=lock_token,
            archive_max_messages=archive_max_messages,
            archive_max_bytes=archive_max_bytes,
        )
        batch = self._batch(splice.summaries, summary=True)
        token = splice.token(op_id, batch.envelopes)
        head = (
            token,
            self.ttl_ms,
            splice.drop,
            splice.lock_token or "",
            *splice.caps,
            self._pairing,
            *_fence(splice.expected),
            *self._blobs(splice.summaries),
        )
        args = batch.args(head)
        return _call(
            self._count,
            "splice_prefix",
            (*self.keys.data, self.keys.lock, self.keys.summaries),
            args,
        )

    def truncate(self, n: int, *, op_id: str | None = None) -> Call[int]:
        """Keep at most ``n`` messages; the reply is the number removed."""
        keep = limits.position(n, "n", low=0)
        args = (write_token("truncate", op_id, self._fresh), self.ttl_ms, keep, self._pairing)
        return _call(self._count, "truncate", self._data, args)

    def rollback(
        self,
        messages: Sequence[str | Message],
        *,
        op_id: str | None = None,
        reopen_calls: bool = False,
    ) -> Call[int]:
        """Remove exactly these messages (by id) wherever they are; the reply is how many."""
        ids = rollback_ids(messages)
        # Not a token of the ids: a later rollback of the same ids is stale, not a retry.
        token = write_token("rollback", op_id, self._fresh)
        check = self._reopening if reopen_calls else self._check
        args = (token, self.ttl_ms, check, len(ids), *map(_json_id, ids))
        return _call(self._count, "rollback", self._data, args)

    def record_input_tokens(self, n: int, *, op_id: str | None = None) -> Call[None]:
        """Make ``n`` (the LLM's reported input tokens) the baseline."""
        n = limits.count(n, "input tokens", high=limits.MAX_TOKENS)
        args = (write_token("record", op_id, self._fresh), self.ttl_ms, n)
        return _call(self._none, "record_tokens", self._data, args)

    def set_ttl(self, ttl: float | timedelta | None) -> Call[bool]:
        """Store ``ttl`` with the conversation and apply it to every key (``None``: no TTL)."""
        return _call(self._flag, "set_ttl", self._data, (limits.ttl_ms(ttl),))

    def delete(self) -> Call[bool]:
        """Remove every key of the conversation; the reply is whether anything existed."""
        return Call(lambda reply: int(reply) > 0, ("UNLINK", *self.keys.all), waits=True)

    # -- reads --------------------------------------------------------------------------------

    def token_estimate(self) -> Call[int | None]:
        """O(1): baseline + tokens since, or the whole history's count; None when empty."""
        return self._fields(lambda fields: self._estimate(fields[:3]))

    def _fields(self, parse: Callable[[list[Any]], T]) -> Call[T]:
        """The meta fields ``total``, ``baseline``, ``mark`` and ``cstate``, read by the
        ``estimate`` script, which refuses a conversation that lost its meta hash or list."""
        keys = (self.keys.msgs, self.keys.meta)
        return _call(lambda reply: parse(self._fields_of(reply)), "estimate", keys, (), waits=False)

    def _fields_of(self, reply: Any) -> list[Any]:
        if isinstance(reply[0], int):  # a refusal: {code, index, reason}
            self._checked(reply)
        return list(reply)

    def _estimate(self, reply: Any) -> int | None:
        """``baseline + total - mark``: the tokens appended since the baseline are what the
        total grew by after ``mark``, the total when the baseline was recorded."""
        try:
            total, baseline, mark = (int(v) if v is not None else None for v in reply)
        except ValueError as exc:
            raise self._context(
                CorruptHistoryError(f"meta hash holds a non-integer: {reply!r}")
            ) from exc
        if not total:
            return None
        if baseline is not None:
            return baseline + total - (mark or 0)
        return total

    def compaction_status(self) -> Call[tuple[int | None, CompactionState]]:
        """The token estimate and the compaction state, in one read."""
        return self._fields(self._status)

    def _status(self, reply: Any) -> tuple[int | None, CompactionState]:
        return self._estimate(reply[:3]), self._decode_state(reply[3])

    def compaction_facts(self) -> Call[CompactionFacts]:
        """What decides whether to compact (``CompactionPolicy.due``), in one read."""
        return self._fields(self._facts)

    def _facts(self, reply: Any) -> CompactionFacts:
        try:
            stored, gave_up_at, gave_up, length = (
                int(reply[i]) if reply[i] is not None else 0 for i in (0, 4, 5, 6)
            )
        except ValueError as exc:
            raise self._context(
                CorruptHistoryError(f"meta hash holds a non-integer: {reply!r}")
            ) from exc
        estimate, state = self._status(reply)
        return CompactionFacts(estimate, stored, state, length, gave_up_at, gave_up)

    def compaction_state(self) -> Call[CompactionState]:
        """The stored compaction state, ``Ready`` when there is none."""
        return Call(self._decode_state, ("HGET", self.keys.meta, "cstate"))

    def _decode_state(self, raw: Any) -> CompactionState:
        try:
            return CompactionState.decode(raw)
        except ValueError as exc:
            raise self._context(
                CorruptHistoryError(f"meta field cstate is not a compaction state: {raw!r}")
            ) from exc

    def ttl(self) -> Call[float | None]:
        """The conversation's stored TTL in seconds, ``None`` when it has none."""
        return Call(self._ttl, ("HGET", self.keys.meta, "ttl"))

    def _ttl(self, raw: Any) -> float | None:
        if raw is None:
            return None
        try:
            return int(raw) / 1000
        except ValueError as exc:
            raise self._context(CorruptHistoryError(f"meta field ttl is {raw!r}")) from exc

    def length(self) -> Call[int]:
        """Number of live messages."""
        return Call(int, ("LLEN", self.keys.msgs))

    def entries(self, start: int = 0, stop: int = -1) -> Call[list[Entry]]:
        """Stored entries from ``start`` to ``stop`` inclusive (LRANGE semantics)."""
        return self.listing(self.keys.msgs, self._decode, start, stop)

    def messages(self, start: int = 0, stop: int = -1) -> Call[list[Message]]:
        """Messages from ``start`` to ``stop`` inclusive (LRANGE semantics)."""
        return self.listing(self.keys.msgs, self._messages, start, stop)

    def _messages(self, raw: Sequence[bytes | str]) -> list[Message]:
        return self.decoded(decode_messages, raw)

    def openai_messages(self) -> Call[list[dict[str, Any]]]:
        """Every message in the chat-completions format, rendered from the stored JSON."""
        return self.listing(self.keys.msgs, self._openai)

    def _openai(self, raw: Sequence[bytes | str]) -> list[dict[str, Any]]:
        return self.decoded(decode_openai, raw)

    def turns(self, *, allow_open: bool = True) -> Call[list[Turn]]:
        """Every live message, grouped into turns (the summaries at the head lead the first)."""
        return self.listing(self.keys.msgs, lambda raw: self._turns(raw, allow_open))

    def _turns(self, raw: Sequence[bytes | str], allow_open: bool) -> list[Turn]:
        try:
            return group_entries(self._decode(raw), allow_open=allow_open, roles="lenient")
        except InvalidMessageError as exc:
            raise self._context(exc) from None

    def tail(self, n: int) -> Call[list[Message]]:
        """The last ``n`` messages."""
        n = limits.position(n, "n", low=0)
        if n == 0:
            return Call(self._messages, ("LRANGE", self.keys.msgs, 1, 0))
        return self.messages(-n, -1)

    def range(self, start: int = 0, stop: int | None = None) -> Call[list[Message]]:
        """Messages ``[start:stop]`` with Python slice bounds (negative counts from the end)."""
        start = limits.position(start, "start")
        if stop is not None:
            stop = limits.position(stop, "stop")
        if stop == 0:
            return Call(self._messages, ("LRANGE", self.keys.msgs, 1, 0))
        return self.messages(start, -1 if stop is None else stop - 1)

    def listing(
        self, key: str, decode: Callable[[Any], T], start: int = 0, stop: int = -1
    ) -> Call[T]:
        """``key``'s entries from ``start`` to ``stop`` inclusive (LRANGE semantics), parsed
        by ``decode``: one ``LRANGE`` where that spans at most a page, else read in pages
        (``store/_pages.py``; the parse raises ``PagesWanted`` for the rest)."""
        listing = Listing(key, self.keys.meta, start, stop, LENGTHS.get(key, 0))
        if listing.single():
            return Call(decode, ("LRANGE", key, start, stop))
        whole = start == 0 and stop == -1

        def parse(envelopes: list[Any]) -> T:
            if whole:
                LENGTHS.remember(key, len(envelopes))
            return decode(envelopes)

        if (first := listing.first_page()) is not None:
            return Call(lambda reply: parse(listing.page(reply)), first)
        return Call(lambda reply: parse(listing.read(reply)), listing.commands(), batch=True)

    def transcript_page(self, start: int = 0, count: int = 500) -> Call[TranscriptPage]:
        """Up to ``count`` entries of the full record from position ``start`` (fewer when
        they read back as more than ``MAX_READ_BYTES``)."""
        start = limits.position(start, "start", low=0)
        count = limits.count(count, "count", low=1, high=limits.MAX_PAGE)
        return _call(
            self._page,
            "transcript",
            (self.keys.msgs, self.keys.meta, self.keys.archive),
            (start, count),
            waits=False,
        )

    def _page(self, reply: Any) -> TranscriptPage:
        """The page the script read, ended after the entry that brings what it reads back
        to ``MAX_READ_BYTES`` (the script counted stored bytes, which compression makes far
        fewer): what is cut is not decompressed, and the next page starts at it."""
        first, after, *raw = reply
        start, kept = int(first), _within_read(raw)
        if kept < len(raw):
            del raw[kept:]
            after = start + kept  # a page's positions follow one another
        messages = self.decoded(functools.partial(decode_messages, summaries=False), raw)
        return TranscriptPage(messages, start, None if int(after) < 0 else int(after))

    # -- compaction state ---------------------------------------------------------------------

    def compaction_event(
        self, event: Event, value: int = 0, freed: int = 0, *, op_id: str | None = None
    ) -> Call[CompactionState]:
        """Apply ``event`` to the stored compaction state atomically; the reply is the new state."""
        if event not in EVENTS:
            raise ValueError(f"event must be one of {', '.join(EVENTS)}, got {event!r}")
        value = limits.count(value, "value", high=MAX_STATE_VALUE)
        freed = limits.count(freed, "freed", high=limits.MAX_TOKENS)
        args = (write_token("state", op_id, self._fresh), self.ttl_ms, event, value, freed)
        return _call(self._state, "compaction_state", self._data, args)

    def _state(self, reply: Any) -> CompactionState:
        return self._decode_state(self._checked(reply))

    def take_warning(self) -> Call[bool]:
        """Move ``Exhausted{warned: false}`` to ``{warned: true}``; True only for the one caller
        that did, so the one-shot warning is given once however many pods race."""
        args = (self._fresh(), self.ttl_ms, "warned", 0, 0)
        return _call(self._won, "compaction_state", self._data, args)

    def _won(self, reply: Any) -> bool:
        if isinstance(reply, list) and ERRORS.get(int(reply[0])) is InvalidTransitionError:
            return False
        self._checked(reply)
        return True

    def exhausted_warning(self, facts: CompactionFacts, policy: CompactionPolicy) -> str:
        """The one-shot warning for a conversation compaction gave up on."""
        return exhausted_warning(self.namespace, self.conversation_id, facts, policy)

    def compaction_stats(self) -> Call[CompactionStats]:
        """How many compactions the conversation has had and the tokens they freed."""
        return Call(self._stats, ("HMGET", self.keys.meta, "compactions", "tokens_freed"))

    def _stats(self, reply: Any) -> CompactionStats:
        try:
            compactions, freed = (int(v) if v is not None else 0 for v in reply)
        except ValueError as exc:
            raise self._context(
                CorruptHistoryError(f"meta hash holds a non-integer counter: {reply!r}")
            ) from exc
        return CompactionStats(compactions, freed)

    def claim_compaction(self, job_id: str, now_ms: int, stale_ms: int) -> Call[bool]:
        """Reserve the one pending compaction; the reply is whether this caller got it."""
        args = (job_id, now_ms, stale_ms)
        return _call(self._flag, "claim_compaction", (self.keys.meta,), args, waits=False)

    def release_claim(self, job_id: str) -> Call[bool]:
        """Drop the pending-compaction claim if it is still ``job_id``'s."""
        args = (op_token("release", (job_id,)), job_id)
        return _call(self._flag, "release_claim", (self.keys.meta,), args, waits=False)

    def _flag(self, reply: Any) -> bool:
        return int(self._checked(reply)) == 1

    def compaction_request(self, policy: CompactionPolicy) -> CompactionRequest:
        """A compaction of this conversation to schedule, under a fresh job id."""
        return CompactionRequest.new(
            self.namespace, self.conversation_id, self.prefix, policy, self._entropy
        )

    def maybe_compact(
        self, policy: CompactionPolicy, schedule: Schedule
    ) -> Generator[Step, Any, bool]:
        """The steps of ``maybe_compact``, for a front end to run: it sends back each
        call's result (or throws its error), hands each request to the scheduler and logs
        each warning (a ``str``) on the ``redis_history`` logger.

        Read the estimate and the state; give the one-shot exhaustion warning if this pod
        wins it; if compaction is due, claim the conversation's one pending compaction and
        schedule it, releasing the claim if scheduling fails. Returns whether it scheduled.
        """
        facts: CompactionFacts = yield self.compaction_facts()
        state = facts.state
        if state.is_exhausted() and not state.warned and (yield self.take_warning()):
            yield self.exhausted_warning(facts, policy)
        if not policy.due(facts):
            return False
        request = self.compaction_request(policy)
        if not (yield self.claim_compaction(request.job_id, self._clock(), request.claim_ms)):
            return False
        try:
            yield Scheduled(schedule, request)
        except BaseException:
            yield self.release_claim(request.job_id)
            raise
        return True


def exhausted_warning(
    namespace: str, conversation_id: str, facts: CompactionFacts, policy: CompactionPolicy
) -> str:
    """The one-shot warning for a conversation compaction gave up on: why, with its numbers,
    and when it is tried again."""
    name = f"conversation {namespace}/{conversation_id} is exhausted"
    again = (
        f"it is tried again once it holds {policy.retry_at(facts.gave_up_at)} live messages "
        f"(now {facts.length}, {facts.tokens} tokens)"
    )
    if facts.gave_up == 3:
        return (
            f"{name}: after compaction the turns it keeps are over the hard limit "
            f"({policy.hard_tokens} tokens): no cut can bring it below while they are kept; "
            "elide old tool outputs (ToolOutputElider), lower keep_last_turns or "
            f"keep_last_tokens, or raise the model's budget; {again}"
        )
    if facts.gave_up == 2:
        return (
            f"{name}: the compactor freed nothing from it at {facts.gave_up_at} live "
            f"messages; {again}"
        )
    return (
        f"{name}: compaction found nothing to cut at {facts.gave_up_at} live messages: it "
        f"keeps the last {policy.keep_last_turns} whole turns and summarizes at least "
        f"{policy.min_messages} messages before them; {again}"
    )


def _fence(expected_ids: Sequence[str] | None) -> tuple[Any, ...]:
    """The arguments of an expected-ids fence: the count (-1 for none), then the ids."""
    if expected_ids is None:
        return (-1,)
    return (len(expected_ids), *map(_json_id, expected_ids))


def _cap(value: int | None, name: str) -> int:
    """An archive cap (0 for none)."""
    return 0 if value is None else limits.position(value, name, low=1)


def batch_of(messages: Sequence[Message]) -> Sequence[Message]:
    """``messages`` if they are a list or tuple of at most ``MAX_BATCH_MESSAGES``."""
    if not isinstance(messages, list | tuple):
        raise TypeError(f"expected a list of messages, got {type(messages).__name__}")
    limits.limited(len(messages), limits.MAX_BATCH_MESSAGES, "messages in one write")
    return messages


def ids_of(ids: Sequence[str] | None, name: str, maximum: int) -> list[str] | None:
    """``ids`` (``None`` stays ``None``) as a list of at most ``maximum`` message ids."""
    if ids is None:
        return None
    if not isinstance(ids, list | tuple):
        raise TypeError(f"{name} must be a list of message ids, got {type(ids).__name__}")
    limits.limited(len(ids), maximum, f"ids in {name}")
    for message_id in ids:
        _json_id(message_id)
    return list(ids)


def rollback_ids(messages: Sequence[str | Message]) -> list[str]:
    """The distinct ids of the messages (or ids) a rollback names, at most ``MAX_ROLLBACK``."""
    if not isinstance(messages, list | tuple):
        raise TypeError(f"rollback takes a list of messages or ids, got {type(messages).__name__}")
    ids = list(dict.fromkeys(m.id if isinstance(m, Message) else m for m in messages))
    if not ids:
        raise ValueError("rollback needs one or more message ids")
    checked = ids_of(ids, "rollback", limits.MAX_ROLLBACK)
    assert checked is not None
    return checked


@dataclass(frozen=True, slots=True)
class Splice:
    """A ``splice_prefix``'s arguments, checked."""

    drop: int
    summaries: list[Message]
    expected: list[str] | None
    lock_token: str | None
    caps: tuple[int, int]
    """The archive's caps in entries and in bytes, 0 for none."""

    @classmethod
    def of(
        cls,
        drop_count: int,
        summary: Message | Sequence[Message],
        *,
        expected_ids: Sequence[str] | None,
        lock_token: str | None,
        archive_max_messages: int | None,
        archive_max_bytes: int | None,
    ) -> Splice:
        """The checked arguments; ``TypeError``, ``ValueError`` or ``LimitExceededError``."""
        drop = limits.count(drop_count, "drop_count", high=limits.MAX_REWRITE)
        summaries = list(batch_of([summary] if isinstance(summary, Message) else summary))
        if not summaries:
            raise ValueError("splice_prefix needs at least one summary message")
        expected = ids_of(expected_ids, "expected_ids", limits.MAX_REWRITE)
        if expected is not None and len(expected) != drop:
            raise ValueError(f"expected_ids names {len(expected)} messages, drop_count is {drop}")
        if lock_token is not None:
            if not _utf8(lock_token):
                raise ValueError("lock_token must be a non-empty UTF-8 string or None")
            limits.limited(len(lock_token), MAX_ID_LENGTH, "lock_token length")
        caps = (
            _cap(archive_max_messages, "archive_max_messages"),
            _cap(archive_max_bytes, "archive_max_bytes"),
        )
        return cls(drop, summaries, expected, lock_token, caps)

    def token(self, op_id: str | None, envelopes: Sequence[bytes]) -> bytes:
        """The caller's ``op_id``, else a token of everything the splice writes and fences
        on: the same summaries over the same prefix are one splice, another summary (even
        under a reused id) another."""
        written = hashlib.blake2b(b"".join(envelopes)).hexdigest()  # JSON objects: unambiguous
        natural = (str(self.drop), written, *(self.expected or ()))
        return write_token("splice", op_id, lambda: op_token("splice", natural))


NOTHING_TO_SEND: Call[bool | None] = Call(lambda _reply: None, ())
"""A call with nothing to send (an empty append): the front ends answer it themselves."""


class CompactionStats(NamedTuple):
    """A conversation's compaction counters, kept in its meta hash by the state script."""

    compactions: int
    """Successful compactions so far."""
    tokens_freed: int
    """Tokens those compactions removed from the live history, net of their summaries."""


@dataclass(frozen=True, slots=True)
class CompactionRequest:
    """One compaction to run in the background: what a scheduler is handed."""

    job_id: str
    """A fresh id (no ``:``), which the conversation's pending claim names."""
    namespace: str
    conversation_id: str
    prefix: str
    policy: CompactionPolicy

    @classmethod
    def new(
        cls,
        namespace: str,
        conversation_id: str,
        prefix: str,
        policy: CompactionPolicy,
        entropy: Entropy,
    ) -> CompactionRequest:
        """A request under a fresh job id: the namespace's job id prefix
        (:func:`~redis_history.store.keys.job_id_prefix`, which a tenant's ACL rule allows)
        and a random UUID, as ``uuid4`` makes, of ``entropy``."""
        job = uuid.UUID(bytes=entropy(16), version=4)
        job_id = f"{job_id_prefix(namespace, prefix)}{job.hex}"
        return cls(job_id, namespace, conversation_id, prefix, policy)

    @property
    def claim_ms(self) -> int:
        """How long the claim blocks another compaction, should this one be lost."""
        return round(self.policy.claim_ttl_seconds * 1000)

    def payload(self) -> dict[str, Any]:
        """The job's keyword arguments, plain JSON: the conversation and the policy."""
        return {
            "namespace": self.namespace,
            "conversation_id": self.conversation_id,
            "prefix": self.prefix,
            "policy": self.policy.model_dump(mode="json"),
        }


Schedule = Callable[[CompactionRequest], object]
"""Runs a compaction in the background, e.g. by enqueueing it (``jobs.compaction_queue()``)."""


class Scheduled(NamedTuple):
    """A step of :meth:`HistoryCore.maybe_compact`: hand ``request`` to ``schedule``."""

    schedule: Schedule
    request: CompactionRequest


Step = Call[Any] | Scheduled | str
"""What the ``maybe_compact`` flow asks its front end to do: run a call, schedule, or log a
warning."""
