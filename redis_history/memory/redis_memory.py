"""Long-term memory on plain Redis (no modules): BM25 over terms indexed in Redis.

:class:`RedisLongTermMemory` is a :class:`~redis_history.memory.base.LongTermMemory` that
runs on any Redis 6.2+ (the embedded one included) and on Redis Cluster. Each owner (an agent
and one user, or an agent alone for memories kept without a user) has its own keys under one
hash tag (:class:`~redis_history.store.keys.MemoryKeys`): the memories, an inverted index (one hash
of postings per term), the counts BM25 needs, and one set per conversation and per tag.

- **Filters by construction.** A recall reads only the keys of the owner its filters name
  (the script is given no other key); the conversation and tag sets are intersected in the
  same script before any memory is scored. ``user_id=None`` recalls the agent's memories kept
  without a user, never every user's: a recall does not span users.
- **Ranking.** BM25 (k1 = 1.2, b = 0.75, the Lucene idf) over the query's terms, in one
  script per recall; equal scores go to the most recently stored. Only memories sharing a term
  with the query are returned (a query with no terms recalls nothing).
- **Duplicates merge.** A text whose normalized form (case-folded, whitespace collapsed) an
  owner already has is not stored again: that memory keeps its id, takes the new
  conversation and tags, and counts as stored now (it moves up in recency). A retried store is
  such a merge, so it is applied once. The scripts keep each metadata value as its JSON text
  and never decode it, so metadata comes back exactly as stored.
- **Terms.** Case-folded word characters, a short English stop list and single Latin
  letters left out, a plural ``s`` taken off; Chinese and Japanese runs (which have no
  spaces) as character bigrams.

Data in an owner's keys that the memory did not write (a record, a posting or a count that
is not its own, a key of another data type) raises ``CorruptHistoryError`` naming it; the
scripts check before their first write, so a refused write changes nothing. Their writes are
ordered so that a store or forget stopped part way (Redis keeps a script's writes before an
error) never leaves a memory listed that is not recalled, and the same call again finishes
it (``lua/memory_store-9.lua``); a store of the text of a memory whose forget stopped part way
finishes that forget first, and keeps the text as a new memory. A text without a term is
refused: it could not be recalled.

Arguments are checked before anything is sent (counts by ``redis_history.limits``, as the
histories' are): a wrong type is a ``TypeError`` (tags are a list, tuple, set or frozenset of
strings, never a bare string or a generator; counts are integers, not ``bool``), a value over
its limit (:data:`MAX_TEXT_BYTES`, :data:`MAX_TERMS`, :data:`MAX_TAGS`,
:data:`MAX_EXTRA_BYTES`, :data:`MAX_TOP_K`, :data:`MAX_LIST`) a ``LimitExceededError`` (a
``ValueError``), a count below its range or extra metadata that is not JSON data a
``ValueError``; a query's terms past :data:`MAX_QUERY_TERMS` are ignored (the query is often
a whole user message).

No call runs over 250 ms on the server, whatever an owner holds: a store refuses, with
``LimitExceededError``, a memory past :data:`MAX_MEMORIES` of its owner, and a merge that would
take a memory past :data:`MAX_TAGS`, :data:`MAX_CONVERSATIONS` or :data:`MAX_EXTRA_BYTES`; a
recall goes over at most :data:`RECALL_BUDGET` postings and scores; a filtered list is one
``ZINTER``. ``tests/test_redis_memory.py`` checks it at those limits with ``SLOWLOG``.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import hashlib
import inspect
import json
import re
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar, cast

from pydantic import ConfigDict, TypeAdapter, ValidationError
from snowballstemmer.english_stemmer import EnglishStemmer

from redis_history import limits
from redis_history.errors import CorruptHistoryError, HistoryError, UnindexedMemoryError
from redis_history.memory import merging
from redis_history.memory.base import MemoryFilters, MemoryRecord, tag_tuple
from redis_history.memory.embedders import (
    MAX_EMBED_BATCH,
    AsyncEmbedder,
    Embedder,
    checked_space,
    normalized,
    resolve_embedder,
)
from redis_history.models import JsonObject
from redis_history.redact import Redactor, client_secrets
from redis_history.store.keys import (
    DEFAULT_NAMESPACE,
    DEFAULT_PREFIX,
    MemoryKeys,
    validate_name,
    validate_scope,
)
from redis_history.wire import RedisFailure, bytes_client, redis_error, resent
from redis_history.wire.call import Call
from redis_history.wire.lane import apipelined, asend, command_of, pipelined, send
from redis_history.wire.plans import Plan, adrive, drive
from redis_history.wire.scripts import refusal, script
from redis_history.wire.twins import AsyncRunner, Runner, Work, twin

__all__ = [
    "MAX_CONVERSATIONS",
    "MAX_EXTRA_BYTES",
    "MAX_LIST",
    "MAX_MEMORIES",
    "MAX_QUERY_TERMS",
    "MAX_SUPERSEDED",
    "MAX_TAGS",
    "MAX_TERMS",
    "MAX_TEXT_BYTES",
    "MAX_TOP_K",
    "MAX_TTL_SECONDS",
    "RECALL_BUDGET",
    "SWEEP_PAGE",
    "TERMS",
    "AsyncRedisLongTermMemory",
    "RedisLongTermMemory",
    "Reindexing",
    "Stored",
    "normalize",
    "terms",
]

T = TypeVar("T")

MAX_TEXT_BYTES = 8192
"""The longest memory, in UTF-8 bytes: memories are facts, not documents."""
MAX_TERMS = 1024
"""The most distinct terms one memory may have (each is a key its store writes)."""
MAX_QUERY_TERMS = 32
"""The distinct terms of a query that count; those after are ignored."""
MAX_TAGS = 16
"""The most tags one memory (or one filter) may carry."""
MAX_EXTRA_BYTES = 4096
"""The largest extra metadata (beyond the filter keys): its keys and their values' JSON texts,
in UTF-8 bytes."""
MAX_MEMORIES = 5_000
"""The most memories one owner keeps: a store of another is refused (``LimitExceededError``).
Every call then stays well under 250 ms of server time, whatever the owner holds."""
MAX_CONVERSATIONS = 64
"""The most conversations one memory is filed under (merges add them)."""
MAX_MESSAGE_IDS = 64
"""The most message ids one memory records as its provenance (a merge keeps the first)."""
MAX_MESSAGE_ID = 128
"""The longest message id, in characters."""
MAX_SUPERSEDED = 1_000
"""The most superseded memories an owner keeps (pointing to their successors); the oldest
goes when another is superseded."""
MAX_TTL_SECONDS = 100 * 365 * 86_400
"""The longest time to live a memory may have (100 years)."""
SWEEP_PAGE = 64
"""The most expired memories one call removes (a store that finds some removes a page)."""
EVICT_ATTEMPTS = 8
"""How often a store into a full, capped owner evicts a memory and tries again."""
MAX_TOP_K = 100
"""The most memories one recall returns."""
MAX_LIST = 100
"""The most memories one ``list`` returns (a page of the largest records is ~3 MB)."""
RECALL_BUDGET = 30_000
"""The most postings and scores one recall goes over (``lua/memory_recall-4.lua``): terms are
read rarest first, and those that would take it past this are left out. A query reaches it
only when its rarest terms are in thousands of memories each."""
MAX_TERM_LENGTH = 64
"""Longer words are cut to this many characters."""
MAX_TF = 999
"""A term's count in one memory is capped here (BM25 saturates long before)."""
FORGET_ATTEMPTS = 5
FORGET_PAGE = 500
"""Records read per ``HSCAN`` and keys removed per ``UNLINK`` when an owner is forgotten."""

RESERVED = frozenset(
    {"agent_id", "user_id", "conversation_id", "conversation_ids", "message_ids", "tags",
     "created_ms", "updated_ms", "memory_id", "ttl_seconds", "expires_ms", "superseded_by",
     "superseded_ms"}
)  # fmt: skip
"""Metadata keys the memory sets itself; other keys are kept as given (JSON)."""

_EXTRA: TypeAdapter[dict[str, Any]] = TypeAdapter(
    JsonObject, config=ConfigDict(allow_inf_nan=False)
)
"""Extra metadata: JSON data only (no tuples, sets, bytes, NaN; string keys; nested at most
``models.MAX_NESTING`` levels), so that what a store accepts reads back equal."""

_SNOWBALL_STOP_LIST = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing would should could ought i'm you're he's she's it's we're they're i've you've we've
    they've i'd you'd he'd she'd we'd they'd i'll you'll he'll she'll we'll they'll isn't
    aren't wasn't weren't hasn't haven't hadn't doesn't don't didn't won't wouldn't shan't
    shouldn't can't cannot couldn't mustn't let's that's who's what's here's there's when's
    where's why's how's a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very
"""
STOPWORDS = frozenset(re.findall(r"\w+", _SNOWBALL_STOP_LIST))
"""Words left out of the index and of queries: Snowball's English stop list, each entry split
into words as the index splits text (``don't`` is ``don`` and ``t``)."""

TERMS = "snowball-english-3.1"
"""How :func:`terms` makes a memory's terms: Snowball's English stemmer (snowballstemmer 3.1)
and stop list. An owner's stats hash records it (``terms``) once every memory is indexed so;
memories indexed otherwise (before it, with no ``s`` in their record) are indexed again
before the owner's next recall, or by ``redis-history memory reindex``."""

_WORD = re.compile(r"\w+")
_CJK = re.compile("([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]+)")
_ENGLISH = EnglishStemmer()
_STEMMING = threading.Lock()  # the stemmer keeps its word in the instance while it works


def normalize(text: str) -> str:
    """``text`` case-folded with its whitespace collapsed: what duplicates are found by."""
    return " ".join(text.casefold().split())


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """``word``'s Snowball English stem; a word with a letter outside ASCII is kept whole."""
    if not word.isascii():
        return word
    with _STEMMING:
        return cast(str, _ENGLISH.stemWord(word))


def _noise(part: str) -> bool:
    """Underscores alone, or one Latin letter (the ``s`` of ``user's``)."""
    return not part.strip("_") or (len(part) == 1 and part.isascii() and part.isalpha())


def terms(text: str) -> list[str]:
    """The terms of ``text``, in order, repeats kept: what the index and queries use."""
    out: list[str] = []
    for word in _WORD.findall(text.casefold()):
        for i, part in enumerate(_CJK.split(word)):
            if not part:
                continue
            if i % 2:  # a Chinese or Japanese run: bigrams, or the one character
                if len(part) == 1:
                    out.append(part)
                else:
                    out.extend(part[j : j + 2] for j in range(len(part) - 1))
            elif part not in STOPWORDS and not _noise(part):
                out.append(_stem(part[:MAX_TERM_LENGTH]))
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Record(NamedTuple):
    """A memory's record, as ``lua/memory_store-9.lua`` describes it, checked."""

    text: str
    conversations: list[str]
    tags: list[str]
    metadata: dict[str, Any]
    created: int
    updated: int
    length: int
    terms: list[str]
    messages: list[str]
    expires: int | None
    successor: str | None
    superseded: int | None


def _problem(record: Any) -> str | None:
    """Why ``record`` is not a memory's record, or ``None`` (``lua/memory_store-9.lua`` checks
    the same)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if not isinstance(record.get("t"), str):
        return "no text"
    for field in ("c", "g", "k", "x"):
        value = record.get(field, [])  # x (message ids): records stored before it have none
        if value != {} and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{field} is not a list of strings"
    stored = record.get("m")
    if stored != [] and not (
        isinstance(stored, dict) and all(isinstance(v, str) for v in stored.values())
    ):
        return "m is not an object of JSON texts"
    for field in ("at", "up", "ex", "sup"):
        value = record.get(field, "0" if field in ("ex", "sup") else None)
        if not (isinstance(value, str) and value.isascii() and value.isdigit()):
            return f"{field} is not a time"
    if not isinstance(record.get("by", ""), str):
        return "by is not a memory id"
    length = record.get("n")
    if type(length) is not int or length < 0:
        return "n is not a length"
    return None


def _strings(value: list[str] | dict[str, Any]) -> list[str]:
    """A checked list of strings (cjson writes an empty one as ``{}``)."""
    return value if isinstance(value, list) else []


def _record(raw: Any, memory_id: str) -> _Record:
    """The record ``raw`` of ``memory_id``, or ``CorruptHistoryError`` saying what is wrong."""
    if not raw:
        raise CorruptHistoryError(f"memory {memory_id} is listed but has no record")
    try:
        record = json.loads(raw)
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError included
        raise CorruptHistoryError(f"memory {memory_id} is not a record: not JSON") from exc
    if problem := _problem(record):
        raise CorruptHistoryError(f"memory {memory_id} is not a record: {problem}")
    metadata: dict[str, Any] = {}
    for key, value in (record["m"] or {}).items():
        try:
            metadata[key] = json.loads(value)
        except ValueError as exc:
            raise CorruptHistoryError(
                f"memory {memory_id} is not a record: metadata {key!r} is not JSON"
            ) from exc
    return _Record(
        record["t"],
        _strings(record["c"]),
        _strings(record["g"]),
        metadata,
        int(record["at"]),
        int(record["up"]),
        record["n"],
        _strings(record["k"]),
        _strings(record.get("x", [])),
        int(record["ex"]) if "ex" in record else None,
        record.get("by"),
        int(record["sup"]) if "sup" in record else None,
    )


class Reindexing(NamedTuple):
    """What :meth:`RedisLongTermMemory.reindex` did to one owner's memories."""

    indexed: int
    """Memories indexed again by :data:`TERMS` (an earlier version had indexed them)."""
    embedded: int
    """Memories given a vector."""


class _Stored(NamedTuple):
    """A store's reply (``lua/memory_store-9.lua``): the memory's id and what the store did
    (:data:`_MERGED`, :data:`_ADDED`, or, having written nothing, :data:`_FORGETTING` or
    :data:`_FULL`), and how many of the owner's memories have expired."""

    memory_id: str
    done: int
    expired: int


_MERGED, _ADDED, _FORGETTING, _FULL = 0, 1, 2, 3
"""What a store did: merged, added; or wrote nothing, the memory with its text being forgotten
(a forget stopped part way), or the capped owner full (the id is the memory to evict)."""


class Stored(NamedTuple):
    """What :meth:`RedisLongTermMemory.remember` did with one text."""

    memory_id: str
    """The memory that holds the text now."""
    outcome: str
    """``added`` (a new memory), ``merged`` (into one that said the same) or ``superseded``
    (a new memory, replacing one it updates)."""
    superseded: tuple[str, ...] = ()
    """The memories it superseded (kept, pointing to it, no longer recalled)."""


def _accepted(reply: Any) -> Any:
    """A memory script's reply, or the exception of its refusal (``[code, index, reason]``,
    told from a result by its integer first item: results start with an id)."""
    if isinstance(reply, list) and reply and isinstance(reply[0], int):
        raise refusal(reply)
    return reply


def _memory_call(
    parse: Callable[[Any], T], name: str, keys: Sequence[str], more: Sequence[str], args: Any
) -> Call[T]:
    """A call of script ``name``: its declared keys, then ``more`` keys its ARGV describe."""
    lua = script(name)
    if len(keys) != lua.nkeys:
        raise AssertionError(f"{name} takes {lua.nkeys} keys, called with {len(keys)}")
    command = ("EVALSHA", lua.sha, len(keys) + len(more), *keys, *more, *args)
    return Call(lambda reply: parse(_accepted(reply)), command, lua)


def _reterm_calls(keys: MemoryKeys, found: Sequence[tuple[str, bytes]]) -> list[Call[int]]:
    """The ``memory_reterm`` calls indexing the memories ``found`` (id, record) again by
    :func:`terms`, each of at most :data:`REINDEX_KEYS` postings keys (one memory at least)."""
    calls: list[Call[int]] = []
    more: list[str] = []
    args: list[Any] = []

    def flush() -> None:
        if args:
            calls.append(_memory_call(int, "memory_reterm", (keys.stats, keys.docs), more, args))
        more[:], args[:] = [], []

    for memory_id, raw in found:
        record = _record(raw, memory_id)
        counts = Counter(terms(record.text))
        length = sum(counts.values())
        fields = json.loads(raw)
        fields.update(k=list(counts), n=length, s=TERMS)
        if more and len(more) + len(record.terms) + len(counts) > REINDEX_KEYS:
            flush()
        more += [keys.term(t) for t in (*record.terms, *counts)]
        args += [memory_id, raw, _json(fields), record.length, length]
        args += [len(record.terms), len(counts)]
        args += [length * 1000 + min(tf, MAX_TF) for tf in counts.values()]
    flush()
    return calls


def _scanned(reply: Any) -> tuple[str, list[tuple[str, Any]]]:
    """An ``HSCAN`` reply: the next cursor and the page's (field, value) pairs."""
    cursor, flat = reply
    if isinstance(flat, dict):  # RESP3
        return _text(cursor), [(_text(k), v) for k, v in flat.items()]
    return _text(cursor), [(_text(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)]


def _owned_keys(keys: MemoryKeys, memory_id: str, raw: Any) -> set[str]:
    """The keys memory ``memory_id``'s record ``raw`` names: its postings and sets."""
    record = _record(raw, memory_id)
    try:
        named = {keys.conversation(c) for c in record.conversations}
        named |= {keys.tag(t) for t in record.tags}
    except ValueError as exc:
        raise CorruptHistoryError(f"memory {memory_id} is not a record: {exc}") from exc
    return named | {keys.term(t) for t in record.terms}


def _each(stores: Iterable[Callable[[], Plan[_Step, T]]]) -> Plan[_Step, list[T]]:
    """What ``store_many``'s stores return; one refused is raised, with its index, once
    the items after it are stored all the same."""
    out: list[T] = []
    refused: HistoryError | None = None
    for index, store in enumerate(stores):
        try:
            out.append((yield from store()))
        except HistoryError as exc:
            exc.index = index
            refused = refused or exc
    if refused is not None:
        raise refused
    return out


class _Nearest(NamedTuple):
    """A vector search's reply (``lua/memory_vsearch-6.lua``): the memories with no vector
    yet, where the next part of the scan starts (``"0"``: none), and its hits (id, score,
    record: ``""`` when the call read a part only)."""

    missing: int
    cursor: str
    hits: list[Any]
    docs: str

    def rows(self) -> Iterator[tuple[str, str, Any]]:
        for i in range(0, len(self.hits), 3):
            yield _text(self.hits[i]), _text(self.hits[i + 1]), self.hits[i + 2]


class _Send(NamedTuple):
    """A step of a plan: one call, whose ``WRONGTYPE`` is said to be about ``key``."""

    call: Call[Any]
    key: str = "a memory key"


class _Pipeline(NamedTuple):
    """A step of a plan: calls sent in one pipeline; the result is their raw replies, an
    error reply as the exception redis-py makes of it."""

    calls: tuple[Call[Any], ...]


class _Embed(NamedTuple):
    """A step of a plan: the memory's embedder's vectors of ``texts`` (raw, as it returns
    them)."""

    texts: tuple[str, ...]


_Step = _Send | _Pipeline | _Embed

RRF_K = 60
"""Reciprocal-rank fusion's constant: a memory ranked r-th (from 1) by keywords and s-th by
meaning scores 1 / (60 + r) + 1 / (60 + s) (a list it is not in adds nothing)."""
REINDEX_ATTEMPTS = 3
"""How often a recall indexes an owner's memories again (:data:`TERMS`) and retries."""
REINDEX_BYTES = 1 << 20
"""The most bytes of records one pass of indexing memories again reads."""
REINDEX_KEYS = 16_384
"""The most postings keys one call indexing memories again writes (a memory has at most
:data:`MAX_TERMS` of its own and as many it had before)."""
SCAN_WORK = 1 << 18
"""The most numbers of vectors one call reads where the server has no vector sets (1,024
vectors of 256): a recall scans the owner's vectors a part per call, each well under
250 ms (5,000 of 256 numbers took Redis 6.2 about 290 ms of CPU in one call on a slow
machine)."""
CANDIDATES = 50
"""How many memories each ranking hands the fusion (at least ``top_k``)."""
NEAREST = 3
"""How many of the owner's nearest memories by meaning a store with ``merge_similar`` weighs
(one it restates, those it updates)."""


class _Memory:
    """What the sync and the asyncio memory share: names, checks, the calls they send and
    the plans that order them (:mod:`redis_history.wire.plans`); only sending differs."""

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], int] | None = None,
        embedder: Embedder | AsyncEmbedder | str | None = None,
        merge_similar: bool = False,
        ttl_seconds: float | None = None,
        max_memories: int | None = None,
    ) -> None:
        """Keep memories through ``client``.

        Args:
            client: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` (their
                ``redis.asyncio`` counterparts for :class:`AsyncRedisLongTermMemory`).
            namespace: the tenant; first in every key, so ACL patterns can confine it.
            prefix: the first part of every key.
            clock: milliseconds since the epoch, for the stored times (tests inject one).
            embedder: what makes the memories' vectors, for recall by meaning as well as by
                keywords (an :class:`~redis_history.memory.embedders.Embedder`,
                ``"offline"``, ``"openai"``, ``"hashing"`` or a dotted path), of at most
                :data:`~redis_history.memory.embedders.MAX_DIMENSIONS` dimensions; ``None``
                recalls by keywords alone.
            merge_similar: merge a memory into the owner's nearest by meaning when it
                restates it (:func:`~redis_history.memory.merging.same_fact`), and supersede
                the one it updates (:func:`~redis_history.memory.merging.updates`), rather
                than keep both; needs an ``embedder``.
            ttl_seconds: how long a memory is kept after it was last stored (a merge starts
                it again), unless its metadata's ``ttl_seconds`` says otherwise; ``None``:
                for ever. An expired memory is never recalled and is removed by the next
                store or list of its owner (or :meth:`forget_expired`).
            max_memories: the most memories an owner keeps: a store of another first evicts
                the owner's least recently stored or recalled memory; ``None``: a store past
                :data:`MAX_MEMORIES` is refused.

        Raises:
            UnsupportedClientError: a client made with ``decode_responses=True``.
            ValueError: an unusable namespace or prefix; a time to live or cap out of range.
        """
        validate_scope(namespace, prefix)
        self.client = bytes_client(client, "a long-term memory")
        self.namespace = namespace
        self.prefix = prefix
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._redactor = Redactor.of(*client_secrets(client))
        self.embedder = resolve_embedder(embedder)
        """What makes the vectors, or ``None``."""
        self._space = "" if self.embedder is None else checked_space(self.embedder)
        if merge_similar and self.embedder is None:
            raise ValueError("merge_similar needs an embedder: it finds restatements by meaning")
        self.merge_similar = merge_similar
        """Whether a store merges into the memory it restates and supersedes the one it
        updates."""
        self.ttl_seconds = _ttl(ttl_seconds, "ttl_seconds")
        """How long a memory is kept after it was last stored, or ``None``."""
        self.max_memories = (
            None
            if max_memories is None
            else limits.count(max_memories, "max_memories", low=1, high=MAX_MEMORIES)
        )
        """The most memories an owner keeps, the least recently used evicted; or ``None``."""

    def _error(self, exc: Exception, key: str = "a memory key") -> HistoryError:
        """The typed error for a redis-py error (a ``WRONGTYPE`` naming ``key``), the
        client's password masked."""
        return redis_error(exc, self._redactor, data=key)

    def keys(self, agent_id: str, user_id: str | None = None) -> MemoryKeys:
        """The keys of one owner's memories."""
        return MemoryKeys.build(agent_id, user_id, self.namespace, self.prefix)

    def _owner(self, filters: MemoryFilters) -> MemoryKeys:
        if not isinstance(filters, MemoryFilters):
            raise TypeError(f"filters must be MemoryFilters, got {type(filters).__name__}")
        return self.keys(filters.agent_id, filters.user_id)

    # -- store --------------------------------------------------------------------------------

    def _store_plan(self, text: str, metadata: Mapping[str, Any]) -> Plan[_Step, str]:
        done = yield from self._remember_plan(text, metadata)
        return done.memory_id

    def _remember_plan(self, text: str, metadata: Mapping[str, Any]) -> Plan[_Step, Stored]:
        make, keys = self._store_call(text, metadata)
        (vector,) = yield from self._vectors([text])
        return (yield from self._decided(make, keys, text, metadata, vector))

    def _decided(
        self,
        make: Callable[[bytes, str], Call[_Stored]],
        keys: MemoryKeys,
        text: str,
        metadata: Mapping[str, Any],
        vector: bytes,
    ) -> Plan[_Step, Stored]:
        """One store: with ``merge_similar``, into the memory it restates, superseding those
        it updates."""
        into, updated = "", tuple[str, ...]()
        if self.merge_similar:
            owner = MemoryFilters(metadata["agent_id"], metadata.get("user_id"))
            into, updated = yield from self._restated(keys, owner, text, vector)
        call = make(vector, into)
        stored = yield from self._stored(call, keys, (yield _Send(call)))
        return (yield from self._superseding(keys, stored, updated))

    def _superseding(
        self, keys: MemoryKeys, stored: _Stored, old: Sequence[str]
    ) -> Plan[_Step, Stored]:
        """What a store did, once each memory of ``old`` it updates is superseded by it."""
        superseded: builtins.list[str] = []
        for memory_id in old:
            done = memory_id != stored.memory_id and (
                yield from self._supersede(keys, memory_id, stored.memory_id)
            )
            if done:
                superseded.append(memory_id)
        if superseded:
            return Stored(stored.memory_id, "superseded", tuple(superseded))
        return Stored(stored.memory_id, "added" if stored.done == _ADDED else "merged")

    def _restated(
        self, keys: MemoryKeys, owner: MemoryFilters, text: str, vector: bytes
    ) -> Plan[_Step, tuple[str, tuple[str, ...]]]:
        """The id of the owner's memory ``text`` restates, or ``""``, and the ids of those it
        updates, among its :data:`NEAREST` nearest by meaning (:func:`merging.decide`)."""
        search = functools.partial(self._vsearch, keys, [], vector, NEAREST)
        nearest = yield from self._nearest(search, (yield _Send(search("0"))), owner, NEAREST)
        into, updated = "", []
        for hit in nearest:
            decision = merging.decide(text, hit.text, 2 * hit.score - 1)
            if decision == "update":
                updated.append(hit.memory_id or "")
            elif decision == "merge" and not into:
                into = hit.memory_id or ""
        return into, tuple(updated)

    def _vectors(self, texts: Sequence[str]) -> Plan[_Step, builtins.list[bytes]]:
        """Each text's vector as the scripts take it (normalized little-endian float32), or
        ``b""`` each without an embedder; asked of the embedder a batch at a time."""
        embedder = self.embedder
        if embedder is None:
            return [b""] * len(texts)
        out: builtins.list[bytes] = []
        for start in range(0, len(texts), MAX_EMBED_BATCH):
            batch = tuple(texts[start : start + MAX_EMBED_BATCH])
            raw = yield _Embed(batch)
            rows = normalized(raw, len(batch), embedder.dimensions, embedder.name)
            out += [struct.pack(f"<{len(row)}f", *row) for row in rows]
        return out

    def _store_many_plan(
        self, items: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> Plan[_Step, builtins.list[str]]:
        done = yield from self._remember_many_plan(items)
        return [stored.memory_id for stored in done]

    def _remember_many_plan(
        self, items: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> Plan[_Step, builtins.list[Stored]]:
        made = [self._store_call(text, metadata) for text, metadata in items]
        if not made:
            return []
        vectors = yield from self._vectors([text for text, _ in items])
        if self.merge_similar:  # each against what the ones before it kept: one at a time
            return (
                yield from _each(
                    functools.partial(self._decided, make, keys, text, metadata, vector)
                    for (make, keys), vector, (text, metadata) in zip(
                        made, vectors, items, strict=True
                    )
                )
            )
        stores = [
            (make(vector, ""), keys) for (make, keys), vector in zip(made, vectors, strict=True)
        ]
        try:
            replies = yield _Pipeline(tuple(call for call, _ in stores))
        except RedisFailure as exc:
            raise self._error(exc) from exc
        return (
            yield from _each(
                functools.partial(self._replied, call, keys, reply)
                for (call, keys), reply in zip(stores, replies, strict=True)
            )
        )

    def _replied(self, call: Call[_Stored], keys: MemoryKeys, reply: Any) -> Plan[_Step, Stored]:
        """One store of ``store_many``'s pipeline, from its ``reply``."""
        if resent(reply):  # the first EVAL loads it for the rest
            stored = yield _Send(call)
        elif isinstance(reply, RedisFailure):
            raise self._error(reply) from reply
        else:
            stored = call.parse(reply)
        done = yield from self._stored(call, keys, stored)
        return Stored(done.memory_id, "added" if done.done == _ADDED else "merged")

    def _stored(
        self, call: Call[_Stored], keys: MemoryKeys, stored: _Stored
    ) -> Plan[_Step, _Stored]:
        """What a store ``call`` that replied ``stored`` did. A memory with its text that a
        forget stopped part way left is forgotten first, as is the least recently used
        memory of a full, capped owner; then ``call`` is sent again (it keeps a new memory,
        never one that is not recalled). Memories found expired are removed after."""
        for _ in range(FORGET_ATTEMPTS + EVICT_ATTEMPTS):
            if stored.done in (_MERGED, _ADDED):
                if stored.expired:
                    yield from self._sweep(keys)
                return stored
            yield from self._forget(keys, stored.memory_id)
            stored = yield _Send(call)
        raise HistoryError(
            f"memory {stored.memory_id} kept being forgotten or evicted while stored"
        )

    def _store_call(
        self, text: str, metadata: Mapping[str, Any]
    ) -> tuple[Callable[[bytes, str], Call[_Stored]], MemoryKeys]:
        """The store of ``text``, checked, as the call it makes given the text's vector."""
        if not isinstance(text, str):
            raise TypeError(f"a memory's text must be a str, got {type(text).__name__}")
        filters, extra = _split(metadata)
        if not text.strip():
            raise ValueError("a memory needs a non-empty text")
        try:
            size = len(text.encode())
        except UnicodeEncodeError:
            raise ValueError("a memory's text must be valid UTF-8 text") from None
        limits.limited(size, MAX_TEXT_BYTES, "a memory's text in UTF-8 bytes")
        counts = Counter(terms(text))
        if not counts:
            raise ValueError(
                "a memory needs a word to be recalled by: stop words, single letters and "
                f"symbols are not indexed, and {text!r} has nothing else"
            )
        limits.limited(len(counts), MAX_TERMS, "a memory's distinct terms")
        keys = self.keys(filters.agent_id, filters.user_id)
        length = sum(counts.values())
        given = "ttl_seconds" in metadata
        ttl = _ttl(metadata["ttl_seconds"], "ttl_seconds") if given else self.ttl_seconds
        now = self._clock()
        expires = "" if ttl is None else str(now + max(1, round(ttl * 1000)))
        conversations = [] if filters.conversation_id is None else [filters.conversation_id]
        fields = {"t": text, "c": conversations, "g": list(filters.tags), "m": extra,
                  "at": str(now), "up": str(now), "n": length, "k": list(counts), "s": TERMS,
                  "x": _message_ids(metadata)}  # fmt: skip
        if expires:
            fields["ex"] = expires
        record = _json(fields)
        sets = [keys.conversation(c) for c in conversations] + [keys.tag(t) for t in filters.tags]
        postings = [length * 1000 + min(tf, MAX_TF) for tf in counts.values()]
        head = (
            _hash(text),
            now,
            record,
            length,
            len(conversations),
            len(filters.tags),
            self.max_memories or MAX_MEMORIES,
            MAX_TAGS,
            MAX_CONVERSATIONS,
            MAX_EXTRA_BYTES,
        )

        evict = "1" if self.max_memories else ""

        def make(vector: bytes, into: str = "") -> Call[_Stored]:
            return _memory_call(
                lambda reply: _Stored(_text(reply[0]), int(reply[1]), int([*reply, 0][2])),
                "memory_store",
                (*keys.owned, keys.vectors, keys.vector_blobs, *keys.lifetimes),
                [*sets, *map(keys.term, counts)],
                (*head, self._space if vector else "", vector, TERMS, into, expires, evict,
                 *postings),
            )  # fmt: skip

        return make, keys

    # -- recall and list ----------------------------------------------------------------------

    def _recall_plan(
        self, query: str, filters: MemoryFilters, top_k: int
    ) -> Plan[_Step, builtins.list[MemoryRecord]]:
        top_k = limits.count(top_k, "top_k", high=MAX_TOP_K)
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        keys = self._owner(filters)
        sets = _filter_sets(keys, filters)
        wanted = list(dict.fromkeys(terms(query)))[:MAX_QUERY_TERMS]
        if top_k == 0 or (not wanted and self.embedder is None):
            return []
        if self.embedder is None:
            calls: tuple[Call[Any], ...] = (self._keywords(keys, sets, wanted, filters, top_k),)
            (by_words,) = yield from self._indexed(keys, calls)
            return (yield from self._touched(keys, by_words))
        n = max(top_k, CANDIDATES)
        (vector,) = yield from self._vectors([query])
        search = functools.partial(self._vsearch, keys, sets, vector, n)
        calls = (search("0"), self._keywords(keys, sets, wanted, filters, n))
        (first, *by_words) = yield from self._indexed(keys, calls if wanted else calls[:1])
        by_meaning = yield from self._nearest(search, first, filters, n)
        if first.missing and (yield from self._backfill(keys)):  # stored before it had vectors
            by_meaning = yield from self._nearest(search, (yield _Send(search("0"))), filters, n)
        return (
            yield from self._touched(
                keys, fused(by_words[0] if by_words else [], by_meaning, top_k)
            )
        )

    def _touched(
        self, keys: MemoryKeys, recalled: builtins.list[MemoryRecord]
    ) -> Plan[_Step, builtins.list[MemoryRecord]]:
        """``recalled``, each noted as used now when the owner is capped (the least recently
        used is evicted first); a memory forgotten meanwhile is not noted."""
        if self.max_memories is not None and recalled:
            now = self._clock()
            pairs = [part for record in recalled for part in (now, record.memory_id)]
            yield _Send(Call(int, ("ZADD", keys.used, "XX", "GT", *pairs)), keys.used)
        return recalled

    def _vsearch(
        self, keys: MemoryKeys, sets: builtins.list[str], vector: bytes, n: int, cursor: str
    ) -> Call[_Nearest]:
        """The call of the ``n`` memories nearest ``vector``, the part of the vectors' hash
        from ``cursor`` where the server has no vector sets."""
        dimensions = len(vector) // 4
        return _memory_call(
            lambda reply: _Nearest(int(reply[0]), _text(reply[1]), list(reply[2:]), keys.docs),
            "memory_vsearch",
            (keys.stats, keys.docs, keys.recent, keys.vectors, keys.vector_blobs, keys.expires),
            sets,
            (self._space, vector, dimensions, n, len(sets), cursor, SCAN_WORK // dimensions,
             self._clock()),
        )  # fmt: skip

    def _nearest(
        self,
        search: Callable[[str], Call[_Nearest]],
        first: _Nearest,
        filters: MemoryFilters,
        n: int,
    ) -> Plan[_Step, builtins.list[MemoryRecord]]:
        """The ``n`` nearest memories, from the ``first`` reply of a vector search and, when
        that read a part of the vectors, the parts after it (then their records are read)."""
        if first.cursor == "0":
            return self._records(first.hits, filters, scored=True)
        best = {memory_id: score for memory_id, score, _ in first.rows()}
        reply = first
        for _ in range(MAX_MEMORIES + 1):
            reply = yield _Send(search(reply.cursor))
            best.update((memory_id, score) for memory_id, score, _ in reply.rows())
            if reply.cursor == "0":
                break
        top = sorted(best, key=lambda memory_id: (-float(best[memory_id]), -int(memory_id)))[:n]
        if not top:
            return []
        read = Call(lambda raw: raw, ("HMGET", first.docs, *top))
        records = yield _Send(read, first.docs)
        hits: builtins.list[Any] = []
        for memory_id, raw in zip(top, records, strict=True):
            if raw:  # a memory forgotten since its part was read is left out
                hits += [memory_id, best[memory_id], raw]
        return self._records(hits, filters, scored=True)

    def _indexed(
        self, keys: MemoryKeys, calls: tuple[Call[Any], ...]
    ) -> Plan[_Step, builtins.list[Any]]:
        """Each call's result (:meth:`_together`); the owner's memories that an earlier
        version indexed (``UnindexedMemoryError``) are indexed again first."""
        for attempt in range(REINDEX_ATTEMPTS):
            try:
                if len(calls) == 1:
                    return [(yield _Send(calls[0]))]
                return (yield from self._together(calls))
            except UnindexedMemoryError:
                if attempt == REINDEX_ATTEMPTS - 1:
                    raise
                yield from self._reterm(keys)
        raise AssertionError("unreachable")

    def _together(self, calls: tuple[Call[Any], ...]) -> Plan[_Step, builtins.list[Any]]:
        """Each call's result, the calls sent in one pipeline (one round trip); a call whose
        script the server did not know is sent again by itself."""
        try:
            replies = yield _Pipeline(calls)
        except RedisFailure as exc:
            raise self._error(exc) from exc
        results: builtins.list[Any] = []
        for call, reply in zip(calls, replies, strict=True):
            if resent(reply):
                results.append((yield _Send(call)))
            elif isinstance(reply, RedisFailure):
                raise self._error(reply) from reply
            else:
                results.append(call.parse(reply))
        return results

    def _backfill(self, keys: MemoryKeys) -> Plan[_Step, int]:
        """Embed up to :data:`MAX_EMBED_BATCH` of the owner's memories that have no vector,
        the newest first; how many vectors were kept."""
        owned = (keys.stats, keys.docs, keys.recent, keys.vectors, keys.vector_blobs)
        unembedded = _memory_call(
            lambda reply: [(_text(reply[i]), reply[i + 1]) for i in range(0, len(reply), 2)],
            "memory_unembedded",
            owned,
            [],
            (self._space, MAX_EMBED_BATCH),
        )
        found: builtins.list[tuple[str, bytes]] = yield _Send(unembedded)
        if not found:
            return 0
        texts = [_record(raw, memory_id).text for memory_id, raw in found]
        vectors = yield from self._vectors(texts)
        args: builtins.list[Any] = [self._space]
        for (memory_id, raw), vector in zip(found, vectors, strict=True):
            args += [memory_id, raw, vector]
        embed = _memory_call(
            int, "memory_embed", (keys.stats, keys.docs, keys.vectors, keys.vector_blobs), [], args
        )
        kept: int = yield _Send(embed)
        return kept

    def _reterm(self, keys: MemoryKeys) -> Plan[_Step, int]:
        """Index again every memory of the owner whose terms :data:`TERMS` did not make, a
        batch per call, the newest first; how many it indexed. The last pass, finding none,
        has the owner's stats hash record :data:`TERMS`."""
        unindexed = _memory_call(
            lambda reply: [(_text(reply[i]), reply[i + 1]) for i in range(0, len(reply), 2)],
            "memory_unindexed",
            (keys.stats, keys.docs, keys.recent),
            [],
            (TERMS, MAX_EMBED_BATCH, REINDEX_BYTES),
        )
        total = 0
        for _ in range(MAX_MEMORIES // MAX_EMBED_BATCH * 2 + 4):
            found: builtins.list[tuple[str, bytes]] = yield _Send(unindexed)
            if not found:
                return total
            for call in _reterm_calls(keys, found):
                total += yield _Send(call)
        raise UnindexedMemoryError(
            f"{keys.stats}: its memories kept changing while they were indexed again"
        )

    def _reindex_plan(
        self, agent_id: str, user_id: str | None, rebuild: bool
    ) -> Plan[_Step, Reindexing]:
        if rebuild and self.embedder is None:
            raise ValueError("reindex with rebuild needs a memory made with an embedder")
        keys = self.keys(agent_id, user_id)
        indexed = yield from self._reterm(keys)
        embedded = 0
        if self.embedder is None:
            return Reindexing(indexed, embedded)
        if rebuild:
            drop = (keys.stats, keys.vectors, keys.vector_blobs)
            yield _Send(_memory_call(int, "memory_unembed", drop, [], ()))
        for _ in range(MAX_MEMORIES // MAX_EMBED_BATCH + 2):
            kept = yield from self._backfill(keys)
            if not kept:
                break
            embedded += kept
        return Reindexing(indexed, embedded)

    def _keywords(
        self,
        keys: MemoryKeys,
        sets: builtins.list[str],
        wanted: builtins.list[str],
        filters: MemoryFilters,
        top_k: int,
    ) -> Call[builtins.list[MemoryRecord]]:
        """The call of the top ``top_k`` by BM25."""
        return _memory_call(
            lambda reply: self._records(reply, filters, scored=True),
            "memory_recall",
            (keys.stats, keys.docs, keys.recent, keys.expires),
            [*sets, *map(keys.term, wanted)],
            (top_k, len(sets), RECALL_BUDGET, TERMS, self._clock()),
        )

    def _records(
        self, reply: Any, filters: MemoryFilters, *, scored: bool
    ) -> builtins.list[MemoryRecord]:
        step = 3 if scored else 2
        out: builtins.list[MemoryRecord] = []
        for i in range(0, len(reply), step):
            memory_id = _text(reply[i])
            score = float(reply[i + 1]) if scored else 0.0
            text, metadata = _decode(reply[i + step - 1], memory_id, filters)
            out.append(MemoryRecord(text, metadata, score, memory_id))
        return out

    def _list_plan(
        self, filters: MemoryFilters, limit: int, offset: int, superseded: bool
    ) -> Plan[_Step, builtins.list[MemoryRecord]]:
        limit = limits.count(limit, "limit", low=1, high=MAX_LIST)
        offset = limits.count(offset, "offset")
        keys = self._owner(filters)
        sets = _filter_sets(keys, filters)
        if superseded:
            return (yield from self._past(keys, filters, limit, offset))
        yield from self._sweep(keys)
        call = _memory_call(
            lambda reply: self._records(reply, filters, scored=False),
            "memory_list",
            (keys.docs, keys.recent),
            sets,
            (min(offset, 2**31), limit, len(sets)),  # past any owner's memories: nothing
        )
        records: builtins.list[MemoryRecord] = yield _Send(call)
        return records

    # -- forget -------------------------------------------------------------------------------

    def _forget_plan(self, memory_id: str, filters: MemoryFilters) -> Plan[_Step, bool]:
        if not isinstance(memory_id, str):
            raise TypeError(f"memory_id must be a str, got {type(memory_id).__name__}")
        keys = self._owner(filters)
        if not memory_id.isascii() or not memory_id.isdigit():
            return False  # not an id store returns
        return (yield from self._forget(keys, memory_id))

    def _forget(
        self,
        keys: MemoryKeys,
        memory_id: str,
        keep: Callable[[Any], str | None] | None = None,
    ) -> Plan[_Step, bool]:
        """Forget ``memory_id``, an id ``store`` returns: read its record, then remove it by a
        script that checks the record is unchanged (read again when it changed). ``keep``
        turns the record read into what the script keeps in its place (a superseded record)
        or ``None`` to leave the memory be; by default a memory is removed, a superseded
        record dropped."""
        read = _read_doc(keys, memory_id)
        for _ in range(FORGET_ATTEMPTS):
            raw = yield _Send(read, keys.docs)
            if raw is None:
                kept = ""
            elif keep is None:
                kept = "!" if _record(raw, memory_id).successor is not None else ""
            elif (kept := keep(raw)) is None:  # type: ignore[assignment]
                return False
            removed = yield _Send(self._forget_call(keys, memory_id, raw, kept))
            if removed >= 0:
                return bool(removed == 1)
        raise HistoryError(f"memory {memory_id} changed {FORGET_ATTEMPTS} times while forgotten")

    def _supersede(self, keys: MemoryKeys, memory_id: str, successor: str) -> Plan[_Step, bool]:
        """Supersede ``memory_id`` by ``successor``: it is no longer recalled nor listed, and
        its record is kept with ``by`` (its successor) and ``sup`` (when); whether it was."""
        now = str(self._clock())

        def superseded(raw: Any) -> str | None:
            if _record(raw, memory_id).successor is not None:
                return None  # superseded already
            return _json({**json.loads(raw), "by": successor, "sup": now})

        return (yield from self._forget(keys, memory_id, superseded))

    def _sweep(self, keys: MemoryKeys) -> Plan[_Step, int]:
        """Remove up to :data:`SWEEP_PAGE` of the owner's expired memories (each only if it
        has still expired when removed: a merge gives it a new time); how many."""
        now = self._clock()
        due = Call(
            lambda ids: [_text(i) for i in ids],
            ("ZRANGEBYSCORE", keys.expires, "-inf", now, "LIMIT", 0, SWEEP_PAGE),
        )
        removed = 0

        def expired(memory_id: str, raw: Any) -> str | None:
            ends = _record(raw, memory_id).expires
            return "" if ends is not None and ends <= now else None

        for memory_id in (yield _Send(due, keys.expires)):
            check = functools.partial(expired, memory_id)
            removed += yield from self._forget(keys, memory_id, check)
        return removed

    def _expired_plan(self, agent_id: str, user_id: str | None) -> Plan[_Step, int]:
        keys = self.keys(agent_id, user_id)
        removed = 0
        for _ in range(MAX_MEMORIES // SWEEP_PAGE + 2):
            swept = yield from self._sweep(keys)
            removed += swept
            if swept < SWEEP_PAGE:
                break
        return removed

    def _past(
        self, keys: MemoryKeys, filters: MemoryFilters, limit: int, offset: int
    ) -> Plan[_Step, builtins.list[MemoryRecord]]:
        """A page of the owner's superseded memories, the latest superseded first (those
        ``filters`` allows of ``limit`` from ``offset``)."""
        page = Call(
            lambda ids: [_text(i) for i in ids],
            ("ZREVRANGE", keys.past, offset, offset + limit - 1),
        )
        ids = yield _Send(page, keys.past)
        if not ids:
            return []
        raws = yield _Send(Call(lambda raw: raw, ("HMGET", keys.docs, *ids)), keys.docs)
        out: builtins.list[MemoryRecord] = []
        for memory_id, raw in zip(ids, raws, strict=True):
            if raw:
                text, metadata = _decode(raw, memory_id, filters)
                if filters.conversation_id in (None, *metadata["conversation_ids"]) and all(
                    tag in metadata["tags"] for tag in filters.tags
                ):
                    out.append(MemoryRecord(text, metadata, 0.0, memory_id))
        return out

    def _forget_call(
        self, keys: MemoryKeys, memory_id: str, raw: bytes | str | None, keep: str = ""
    ) -> Call[int]:
        """The script removing ``memory_id`` if its record is still ``raw`` (``keep``: see
        ``lua/memory_forget-9.lua``); with ``raw`` ``None`` it removes only what a forget
        stopped after removing the record left."""
        sets: builtins.list[str] = []
        postings: builtins.list[str] = []
        args: tuple[Any, ...] = (memory_id, "", "", 0, 0)
        if raw is not None:
            record = _record(raw, memory_id)
            try:
                sets = [keys.conversation(c) for c in record.conversations]
                sets += [keys.tag(t) for t in record.tags]
            except ValueError as exc:
                raise CorruptHistoryError(f"memory {memory_id} is not a record: {exc}") from exc
            postings = [keys.term(t) for t in record.terms]
            args = (memory_id, raw, _hash(record.text), record.length, len(sets))
        return _memory_call(
            int,
            "memory_forget",
            (*keys.owned, keys.vectors, keys.vector_blobs, *keys.lifetimes),
            [*sets, *postings],
            (*args, keep, self._clock(), MAX_SUPERSEDED),
        )

    def _forget_owner_plan(self, agent_id: str, user_id: str | None) -> Plan[_Step, int]:
        keys = self.keys(agent_id, user_id)
        forgotten = 0
        for _ in range(FORGET_ATTEMPTS):
            # `recent` first: from then on none of the owner's memories is listed or recalled
            yield _Send(Call(int, ("UNLINK", keys.recent)), keys.recent)
            named: set[str] = set()
            cursor = "0"
            while True:
                page = Call(_scanned, ("HSCAN", keys.docs, cursor, "COUNT", FORGET_PAGE))
                cursor, records = yield _Send(page, keys.docs)
                for memory_id, raw in records:
                    named.update(_owned_keys(keys, memory_id, raw))
                    forgotten += 1
                if cursor == "0":
                    break
            ordered = sorted(named)
            for start in range(0, len(ordered), FORGET_PAGE):
                yield _Send(Call(int, ("UNLINK", *ordered[start : start + FORGET_PAGE])))
            last = (
                keys.docs,
                keys.dedup,
                keys.vectors,
                keys.vector_blobs,
                *keys.lifetimes,
                keys.stats,
            )
            yield _Send(Call(int, ("UNLINK", *last)))
            left = yield _Send(Call(int, ("EXISTS", keys.recent, keys.docs, keys.stats)))
            if not left:
                return forgotten
        raise HistoryError(f"{keys.base}: memories kept being stored while it was forgotten")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.namespace!r})"

    @twin
    def store(self, text: str, metadata: Mapping[str, Any]) -> Work[str]:
        """Keep ``text`` for the owner ``metadata`` names, or merge it into that owner's memory
        with the same normalized text; returns the memory's id (the same id for a merge).

        Args:
            text: the memory.
            metadata: ``agent_id`` (required), ``user_id``, ``conversation_id``, ``tags``
                (strings), and any other JSON-serializable keys, kept as given (on a merge the
                new values win).

        Raises:
            TypeError: a text that is not a ``str``, metadata that is not a mapping, tags that
                are not a list, tuple, set or frozenset of strings.
            ValueError: no ``agent_id``, an unusable name or tag, an empty text or one without
                a term, extra metadata that is not JSON data (tuples, sets, bytes, NaN,
                non-string keys, nesting past ``MAX_NESTING``).
            LimitExceededError: a text, its distinct terms, tags or extra metadata over its
                limit; the owner has :data:`MAX_MEMORIES` memories, or the merge would take
                the memory past its most tags, conversations or extra metadata (nothing is
                written).
            CorruptHistoryError: a key, record, posting or count of the owner is not what
                the memory writes (nothing is written).
            HistoryError: the owner's memory with this text, which a forget stopped part way
                left, kept changing while that forget was finished.
            StoreUnavailableError: Redis could not be reached.
        """
        return self._store_plan(text, metadata)

    @twin
    def remember(self, text: str, metadata: Mapping[str, Any]) -> Work[Stored]:
        """:meth:`store`, saying what it did: ``added``, ``merged`` or ``superseded`` (with
        ``merge_similar``, the memories it updates are superseded: kept, pointing to it,
        never recalled again). Raises what :meth:`store` raises."""
        return self._remember_plan(text, metadata)

    @twin
    def remember_many(
        self, items: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> Work[builtins.list[Stored]]:
        """:meth:`store_many`, saying what each store did (:meth:`remember`)."""
        return self._remember_many_plan(items)

    @twin
    def supersede(self, memory_id: str, text: str, metadata: Mapping[str, Any]) -> Work[Stored]:
        """Store ``text`` (as :meth:`remember` does) as the successor of the owner's memory
        ``memory_id``, which is then superseded: kept, with ``superseded_by`` and
        ``superseded_ms`` in its metadata (``list(..., superseded=True)`` shows it), never
        recalled or listed with the live memories again. For an extractor's explicit update
        ("moved from Lisbon to Porto"). A memory already superseded, or gone, is left as it is
        (``superseded`` is empty then).

        Raises:
            What :meth:`store` raises; ``TypeError`` for a ``memory_id`` that is not a ``str``.
        """
        return self._supersede_plan(memory_id, text, metadata)

    def _supersede_plan(
        self, memory_id: str, text: str, metadata: Mapping[str, Any]
    ) -> Plan[_Step, Stored]:
        if not isinstance(memory_id, str):
            raise TypeError(f"memory_id must be a str, got {type(memory_id).__name__}")
        make, keys = self._store_call(text, metadata)
        (vector,) = yield from self._vectors([text])
        call = make(vector, "")
        stored = yield from self._stored(call, keys, (yield _Send(call)))
        old = (memory_id,) if memory_id.isascii() and memory_id.isdigit() else ()
        return (yield from self._superseding(keys, stored, old))

    @twin
    def find(self, text: str, filters: MemoryFilters) -> Work[MemoryRecord | None]:
        """The owner's live memory that says ``text``: the one with its normalized text, or,
        with an embedder, the nearest by meaning that ``text`` restates
        (:func:`~redis_history.memory.merging.same_fact`); ``None`` if there is none. What an
        extractor's update or delete names is found by.

        Raises:
            TypeError: ``text`` not a ``str``, ``filters`` not :class:`MemoryFilters`.
            ValueError: an unusable name.
            StoreUnavailableError: Redis could not be reached.
        """
        return self._find_plan(text, filters)

    def _find_plan(self, text: str, filters: MemoryFilters) -> Plan[_Step, MemoryRecord | None]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        keys = self._owner(filters)
        owner = MemoryFilters(filters.agent_id, filters.user_id)
        same = Call(lambda raw: raw, ("HGET", keys.dedup, _hash(text)))
        memory_id = yield _Send(same, keys.dedup)
        if memory_id is not None:
            memory_id = _text(memory_id)
            listed = Call(lambda raw: raw, ("ZSCORE", keys.recent, memory_id))
            live, raw = yield from self._together((listed, _read_doc(keys, memory_id)))
            if live is not None and raw is not None:
                found, metadata = _decode(raw, memory_id, owner)
                return MemoryRecord(found, metadata, 1.0, memory_id)
        if self.embedder is None or not text.strip():
            return None
        (vector,) = yield from self._vectors([text])
        search = functools.partial(self._vsearch, keys, [], vector, NEAREST)
        for hit in (yield from self._nearest(search, (yield _Send(search("0"))), owner, NEAREST)):
            if merging.same_fact(text, hit.text, 2 * hit.score - 1):
                return hit
        return None

    @twin
    def forget_expired(self, agent_id: str, user_id: str | None = None) -> Work[int]:
        """Remove every memory of the owner whose time to live has run out; how many. An
        expired memory is never recalled, and a store or list of the owner removes a page of
        them (:data:`SWEEP_PAGE`) itself; this removes them all.

        Raises:
            ValueError: an unusable name.
            CorruptHistoryError: a record is not what the memory writes.
            StoreUnavailableError: Redis could not be reached.
        """
        return self._expired_plan(agent_id, user_id)

    @twin
    def store_many(
        self, items: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> Work[builtins.list[str]]:
        """Store each ``(text, metadata)`` as :meth:`store` does, in one pipeline; returns the
        ids in order. Every item is checked before anything is sent. Each store is atomic, the
        batch is not: a batch cut short (its connection lost) has stored some of its items,
        each whole, and the same batch sent again stores the rest (the others merge into
        themselves).

        Raises:
            TypeError, ValueError: an item :meth:`store` would refuse (nothing is sent).
            HistoryError: Redis refused an item, e.g. ``LimitExceededError`` (the error's
                ``index`` is the item's); that item wrote nothing, the others were stored.
            StoreUnavailableError: Redis could not be reached; the items that reached it
                were stored.
        """
        return self._store_many_plan(items)

    @twin
    def recall(
        self, query: str, filters: MemoryFilters, top_k: int
    ) -> Work[builtins.list[MemoryRecord]]:
        """At most ``top_k`` of the owner's memories that ``filters`` allows and that share a
        term with ``query``, by BM25 score, the most recently stored first on a tie.

        Raises:
            TypeError: ``top_k`` not an integer (or a ``bool``), ``query`` not a ``str``,
                ``filters`` not :class:`MemoryFilters`.
            ValueError: ``top_k`` below 0; an unusable name.
            LimitExceededError: ``top_k`` above :data:`MAX_TOP_K`, more than
                :data:`MAX_TAGS` tags.
            CorruptHistoryError: a key, record, posting or count of the owner is not what
                the memory writes (nothing is written).
            StoreUnavailableError: Redis could not be reached.
        """
        return self._recall_plan(query, filters, top_k)

    @twin
    def forget(self, memory_id: str, filters: MemoryFilters) -> Work[bool]:
        """Remove the memory ``memory_id`` of the owner ``filters`` names (its agent and user;
        the other fields are not checked); returns whether there was one. The memory is read
        first, then removed by a script that checks it is unchanged (a merge in between makes
        it read again). A call redis-py retried after a lost reply returns ``False``, the
        first attempt having removed it.

        Raises:
            TypeError: ``memory_id`` not a ``str``, ``filters`` not :class:`MemoryFilters`.
            ValueError: an unusable name.
            HistoryError: the memory kept changing while it was being removed.
            CorruptHistoryError: a key, record, posting or count of the owner is not what
                the memory writes (nothing is written).
            StoreUnavailableError: Redis could not be reached.
        """
        return self._forget_plan(memory_id, filters)

    @twin
    def forget_owner(self, agent_id: str, user_id: str | None = None) -> Work[int]:
        """Remove every memory of the owner (``agent_id``, ``user_id``) and every key that
        names it: records, postings, conversation and tag sets, vectors, counts. Returns how
        many memories it removed (0 for an owner with none; calling again is harmless).

        The recency index goes first, so no memory of the owner is listed or recalled once
        the call has begun; the records are then read a page at a time (``HSCAN``) for the
        keys they name, which are removed a page of keys per ``UNLINK``. A call cut short
        leaves the records it had not reached: calling again finishes. A memory stored for
        the owner while this runs may leave keys behind (stop the agent storing for the
        user first); ``redis-history memory forget`` also sweeps the owner's key pattern.

        Raises:
            ValueError: an unusable name.
            CorruptHistoryError: a record is not what the memory writes (nothing more is
                removed).
            HistoryError: memories kept being stored while it ran.
            StoreUnavailableError: Redis could not be reached.
        """
        return self._forget_owner_plan(agent_id, user_id)

    @twin
    def list(
        self,
        filters: MemoryFilters,
        *,
        limit: int = 100,
        offset: int = 0,
        superseded: bool = False,
    ) -> Work[builtins.list[MemoryRecord]]:
        """The owner's memories ``filters`` allows, the most recently stored first: ``limit``
        of them from ``offset`` (expired memories are removed first). With ``superseded``,
        the owner's superseded memories instead, the latest superseded first, each with
        ``superseded_by`` and ``superseded_ms`` in its metadata (the page is taken before
        the conversation and tag filters: it may hold fewer).

        Raises:
            TypeError: ``limit`` or ``offset`` not an integer (or a ``bool``), ``filters`` not
                :class:`MemoryFilters`.
            ValueError: ``limit`` below 1, ``offset`` negative; an unusable name.
            LimitExceededError: ``limit`` above :data:`MAX_LIST`, more than :data:`MAX_TAGS`
                tags.
            CorruptHistoryError: a key, record, posting or count of the owner is not what
                the memory writes (nothing is written).
            StoreUnavailableError: Redis could not be reached.
        """
        return self._list_plan(filters, limit, offset, superseded)

    @twin
    def reindex(
        self, agent_id: str, user_id: str | None = None, *, rebuild: bool = False
    ) -> Work[Reindexing]:
        """Bring every memory of the owner (``agent_id``, ``user_id``) up to this version:
        index again by :data:`TERMS` those an earlier version indexed by other terms, then,
        with an embedder, embed those that have no vector yet (stored before the owner had
        one); with ``rebuild``, drop the owner's vectors first and embed them all again (to
        change embedders). A recall does the indexing itself and embeds up to
        :data:`MAX_EMBED_BATCH` missing vectors; this does it all, a batch per round trip,
        each batch atomic.

        Raises:
            ValueError: an unusable name; ``rebuild`` with no embedder.
            EmbedderMismatchError: the owner's vectors are another embedder's (without
                ``rebuild``).
            EmbeddingError: the embedder failed; the batches before it are kept.
        """
        return self._reindex_plan(agent_id, user_id, rebuild)


class RedisLongTermMemory(_Memory, Runner):
    """A :class:`~redis_history.memory.base.LongTermMemory` in Redis, ranked by BM25.

    Every method is one script (``forget`` reads the memory first), on one hash slot.
    """

    def run(self, work: Work[T]) -> T:
        """Drive an operation's plan through this memory's client."""
        return drive(cast(Plan[_Step, T], work), self._do)

    def _do(self, step: _Step) -> Any:
        """One step of a plan, sent through this memory's client (or the embedder's, for
        vectors)."""
        if isinstance(step, _Embed):
            return cast(Embedder, self.embedder).embed(step.texts)
        if isinstance(step, _Pipeline):
            commands = [command_of(self.client, call) for call in step.calls]
            return pipelined(self.client, commands, raise_on_error=False)
        try:
            reply = send(self.client, step.call)
        except RedisFailure as exc:
            raise self._error(exc, step.key) from exc
        return step.call.parse(reply)


class AsyncRedisLongTermMemory(_Memory, AsyncRunner):
    """:class:`RedisLongTermMemory` on a ``redis.asyncio`` client: the same methods, as
    coroutines, with the same checks, limits and errors (one implementation runs both)."""

    async def run(self, work: Work[T]) -> T:
        """:meth:`RedisLongTermMemory.run`, awaited."""
        return await adrive(cast(Plan[_Step, T], work), self._do)

    async def _do(self, step: _Step) -> Any:
        """One step of a plan, sent through this memory's client (or the embedder's, for
        vectors: a blocking ``embed`` runs in a worker thread)."""
        if isinstance(step, _Embed):
            embedder: Any = self.embedder
            if inspect.iscoroutinefunction(embedder.embed):
                return await embedder.embed(step.texts)
            return await asyncio.to_thread(embedder.embed, step.texts)
        if isinstance(step, _Pipeline):
            commands = [command_of(self.client, call) for call in step.calls]
            return await apipelined(self.client, commands, raise_on_error=False)
        try:
            reply = await asend(self.client, step.call)
        except RedisFailure as exc:
            raise self._error(exc, step.key) from exc
        return step.call.parse(reply)


def _read_doc(keys: MemoryKeys, memory_id: str) -> Call[Any]:
    """The call reading memory ``memory_id``'s record (raw; ``None`` for none)."""
    return Call(lambda raw: raw, ("HGET", keys.docs, memory_id))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _hash(text: str) -> str:
    return hashlib.blake2b(normalize(text).encode(), digest_size=16).hexdigest()


def _split(metadata: Mapping[str, Any]) -> tuple[MemoryFilters, dict[str, str]]:
    """The filter fields of a memory's metadata, checked, and the rest: each value checked to
    be JSON data (what reads back equal) and written as its JSON text, the whole size-capped."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"a memory's metadata must be a mapping, got {type(metadata).__name__}")
    if not metadata.get("agent_id"):
        raise ValueError("a memory's metadata needs an agent_id")
    for key in ("conversation_ids", "created_ms", "updated_ms", "memory_id", "expires_ms",
                "superseded_by", "superseded_ms"):  # fmt: skip
        if key in metadata:
            raise ValueError(f"metadata key {key!r} is set by the memory itself")
    filters = MemoryFilters(
        metadata["agent_id"],
        metadata.get("user_id"),
        metadata.get("conversation_id"),
        tag_tuple(metadata.get("tags"), "a memory's tags"),
    )
    _check_tags(filters.tags)
    try:
        extra = _EXTRA.validate_python({k: v for k, v in metadata.items() if k not in RESERVED})
        texts = {key: _json(value) for key, value in extra.items()}
        size = sum(len(key.encode()) + len(text.encode()) for key, text in texts.items())
    except ValidationError as exc:
        raise ValueError(f"a memory's extra metadata must be JSON data: {exc}") from None
    except UnicodeEncodeError:
        raise ValueError("a memory's extra metadata holds a lone surrogate") from None
    limits.limited(size, MAX_EXTRA_BYTES, "a memory's extra metadata in bytes of JSON")
    return filters, texts


def _message_ids(metadata: Mapping[str, Any]) -> list[str]:
    """The ids of the messages a memory came from (``message_ids``), checked."""
    ids = metadata.get("message_ids", [])
    if isinstance(ids, str) or not isinstance(ids, list | tuple):
        raise TypeError(f"message_ids must be a list of str, got {type(ids).__name__}")
    limits.limited(len(ids), MAX_MESSAGE_IDS, "a memory's message ids")
    for message_id in ids:
        if not isinstance(message_id, str) or not message_id:
            raise ValueError(f"a message id must be a non-empty str, got {message_id!r}")
        limits.limited(len(message_id), MAX_MESSAGE_ID, "a message id's characters")
    return list(dict.fromkeys(ids))


def _check_tags(tags: Sequence[str]) -> None:
    limits.limited(len(tags), MAX_TAGS, "tags")
    for tag in tags:
        validate_name(tag, "tag")


def _filter_sets(keys: MemoryKeys, filters: MemoryFilters) -> list[str]:
    tags = list(dict.fromkeys(filters.tags))
    _check_tags(tags)
    sets = [keys.tag(t) for t in tags]
    if filters.conversation_id is not None:
        sets.insert(0, keys.conversation(filters.conversation_id))
    return sets


def _decode(raw: Any, memory_id: str, filters: MemoryFilters) -> tuple[str, Mapping[str, Any]]:
    """A record's text and the metadata a caller sees."""
    record = _record(raw, memory_id)
    conversations = record.conversations
    metadata = record.metadata
    metadata["agent_id"] = filters.agent_id
    if filters.user_id is not None:
        metadata["user_id"] = filters.user_id
    if filters.conversation_id in conversations:
        metadata["conversation_id"] = filters.conversation_id
    elif conversations:
        metadata["conversation_id"] = conversations[0]
    metadata["conversation_ids"] = conversations
    metadata["message_ids"] = record.messages
    metadata["tags"] = record.tags
    metadata["created_ms"] = record.created
    metadata["updated_ms"] = record.updated
    metadata["memory_id"] = memory_id
    if record.expires is not None:
        metadata["expires_ms"] = record.expires
    if record.successor is not None:
        metadata["superseded_by"] = record.successor
        metadata["superseded_ms"] = record.superseded
    return record.text, MappingProxyType(metadata)


def _ttl(value: Any, what: str) -> float | None:
    """A time to live in seconds, checked: ``None`` (for ever) or a number above 0 and at
    most :data:`MAX_TTL_SECONDS`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds or None, got {value!r}")
    if not 0 < value <= MAX_TTL_SECONDS:  # NaN too
        raise ValueError(f"{what} must be above 0 and at most {MAX_TTL_SECONDS}, got {value!r}")
    return float(value)


def fused(
    by_words: Sequence[MemoryRecord], by_meaning: Sequence[MemoryRecord], top_k: int
) -> list[MemoryRecord]:
    """The ``top_k`` memories of two rankings fused by reciprocal rank (:data:`RRF_K`), the
    newest first on equal scores; each record's score is its fused score."""
    scores: dict[str, float] = {}
    records: dict[str, MemoryRecord] = {}
    for ranking in (by_words, by_meaning):
        for rank, record in enumerate(ranking, start=1):
            memory_id = record.memory_id or ""
            scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
            records.setdefault(memory_id, record)
    best = sorted(scores, key=lambda memory_id: (-scores[memory_id], -int(memory_id)))
    return [replace(records[memory_id], score=scores[memory_id]) for memory_id in best[:top_k]]
