"""The one place Redis key names are built.

With prefix ``rh``, namespace ``NS`` and conversation ``C``::

    rh:NS:{C}:msgs     LIST    message envelopes
    rh:NS:{C}:meta     HASH    token accounting, role state, version, compaction state
    rh:NS:{C}:archive  LIST    originals replaced by summaries
    rh:NS:{C}:lock     STRING  compaction lock
    rh:NS:{C}:summaries HASH   a HistoryManager's shared summaries, the run of messages
                               each covers and the claims of pods summarizing
                               (``lua/includes/summaries.lua``); every write applies the
                               TTL to it too, it is deleted with the conversation, not
                               exported
    rh:NS:{C}:stage    LIST    msgs, renamed for the moment a large append lands (inside
                               one MULTI/EXEC: never seen outside it; one left there by
                               anything else is deleted by the next staged append)
    rh:NS:{C}:restore:T:msgs  an import's or a fork's staged list, meta hash (``:meta``) and
                              archive (``:archive``), renamed over the three data keys at
                              once by ``lua/restore-8.lua``; they expire if the copy never
                              ends

The meta hash's fields: ``total`` (tokens of the live messages), ``baseline`` and
``mark`` (the LLM's reported input tokens and the total when it was recorded),
``role`` and ``open`` (the last role and the unanswered tool call ids), ``version``
(bumped by every rewrite: replace, splice, truncate, rollback; appends only grow the
list, so version and length together name the content), ``ops`` (the last 32 writes
other than appends, 10 bytes each: the write's 6-byte operation token and its result
as a 4-byte integer; so a retried write is applied once), ``opa`` (the last 32 to 39
appends, 8 bytes each: the token, and the span of the batch, which rollbacks and
truncates cut or forget, ``lua/includes/spans.lua``), ``ttl`` (the conversation's TTL
in ms, which every writer applies), ``abytes`` and ``adropped`` (the archive's size, and
how many archived entries its caps dropped), ``cstate``, ``compactions`` and
``tokens_freed`` (compaction), and ``queued`` and ``queued_at`` (the pending-
compaction claim).

The braces make the conversation id the hash tag, so every script touches one
cluster slot; the namespace comes first so an ACL key pattern such as
``~rh:tenant-a:*`` confines a tenant.

On the compaction queue's Redis, RQ names the keys: a namespace's own queue is
``rq:queue:<queue>:<namespace>`` (:func:`tenant_queue`) and every compaction job's id
starts with a tag of its namespace (:func:`job_id_prefix`), so its job is
``rq:job:rhc-<tag>-<uuid>``: patterns an ACL rule confines a tenant's enqueueing to.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "DATA_KINDS",
    "DEFAULT_NAMESPACE",
    "DEFAULT_PREFIX",
    "GLOB_CHARACTERS",
    "JOB_ID_DIGITS",
    "RQ_JOB_PREFIX",
    "RQ_QUEUE_PREFIX",
    "ConversationKeys",
    "MemoryKeys",
    "conversation_of",
    "conversation_pattern",
    "glob_escape",
    "job_id_prefix",
    "namespace_pattern",
    "tenant_queue",
    "validate_name",
    "validate_scope",
]

DEFAULT_PREFIX = "rh"
DEFAULT_NAMESPACE = "default"
MAX_NAME_LENGTH = 200

_FORBIDDEN = re.compile(r"[{}\x00-\x1f\x7f]")
GLOB_CHARACTERS = "*?[]\\"
"""What Redis's glob patterns (``SCAN MATCH``, ACL key patterns) read as more than itself."""
_GLOB = re.compile(r"([*?\[\]\\])")
DATA_KINDS = ("msgs", "meta", "archive")
"""The suffixes of a conversation's data keys (:attr:`ConversationKeys.data`)."""
_SURROGATE = re.compile("[\ud800-\udfff]")
RQ_QUEUE_PREFIX = "rq:queue:"
"""RQ's key of a queue, before its name (``rq.Queue.redis_queue_namespace_prefix``)."""
RQ_JOB_PREFIX = "rq:job:"
"""RQ's key of a job, before its id (``rq.job.Job.redis_job_namespace_prefix``)."""
JOB_ID_DIGITS = 32
"""The hex digits of a random UUID that end a compaction job's id."""


def validate_name(value: str, what: str, *, allow_colon: bool = True) -> str:
    """Return ``value`` if it is usable inside a key, else raise ``ValueError`` saying why.

    Usable: a non-empty ``str`` of at most ``MAX_NAME_LENGTH`` characters, without
    braces (they would move the hash tag), control characters or lone surrogates
    (UTF-8 cannot encode them, so every command would fail), and without ``:``
    where ``allow_colon`` is false.
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}")
    if _FORBIDDEN.search(value):
        raise ValueError(f"{what} {value!r} may not contain braces or control characters")
    if found := _SURROGATE.search(value):
        raise ValueError(
            f"{what} {value!r} holds a lone surrogate U+{ord(found.group()):04X}, "
            "which UTF-8 cannot encode"
        )
    if not allow_colon and ":" in value:
        raise ValueError(f"{what} {value!r} may not contain ':'")
    return value


def validate_scope(namespace: str, prefix: str) -> None:
    """Check a namespace and a key prefix: each a usable name (:func:`validate_name`) without
    ``:``, which would make one namespace's keys another's, or a space, which no ACL key
    pattern can hold (Redis refuses the rule), so such a namespace could never be confined.

    Raises:
        ValueError: either is not usable, saying which and why.
    """
    for value, what in ((namespace, "namespace"), (prefix, "key prefix")):
        validate_name(value, what, allow_colon=False)
        if " " in value:
            raise ValueError(
                f"{what} {value!r} may not contain a space: no ACL key pattern can hold one"
            )


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis glob pattern: each of :data:`GLOB_CHARACTERS`
    behind a backslash."""
    return _GLOB.sub(r"\\\1", text)


def conversation_pattern(
    namespace: str = DEFAULT_NAMESPACE, prefix: str = DEFAULT_PREFIX, match: str = "*"
) -> str:
    """The ``SCAN MATCH`` pattern of the keys of a namespace's conversations whose id
    matches the glob ``match`` (the prefix and namespace taken literally).

    It also matches keys that are not a conversation's data (its lock, an import's
    staging keys): :func:`conversation_of` tells them apart.
    """
    validate_scope(namespace, prefix)
    if not match or "{" in match or "}" in match:
        raise ValueError(f"a conversation glob must be non-empty, without braces: {match!r}")
    return f"{glob_escape(prefix)}:{glob_escape(namespace)}:{{{match}}}:*"


def conversation_of(
    key: str | bytes, namespace: str = DEFAULT_NAMESPACE, prefix: str = DEFAULT_PREFIX
) -> str | None:
    """The conversation whose data key (``msgs``, ``meta``, ``archive``) ``key`` is in the
    namespace, or ``None`` for any other key."""
    text = key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key
    head = f"{prefix}:{namespace}:{{"
    if not text.startswith(head):
        return None
    conversation, brace, kind = text[len(head) :].partition("}:")
    return conversation if brace and conversation and kind in DATA_KINDS else None


def namespace_pattern(namespace: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The key pattern of everything a namespace holds (conversations and memories), for an
    ACL rule (``~rh:tenant-a:*``).

    Raises:
        ValueError: an unusable name, or one holding a glob character, which would widen
            the pattern to other namespaces' keys.
    """
    validate_scope(namespace, prefix)
    for value, what in ((namespace, "namespace"), (prefix, "key prefix")):
        if found := _GLOB.search(value):
            raise ValueError(
                f"{what} {value!r} holds {found.group()!r}, which an ACL key pattern reads "
                "as a wildcard: the rule would reach other namespaces' keys"
            )
    return f"{prefix}:{namespace}:*"


def job_id_prefix(namespace: str, prefix: str = DEFAULT_PREFIX) -> str:
    """How the ids of a namespace's compaction jobs start: ``rhc-``, 20 hex digits of a
    BLAKE2b digest of the prefix and namespace (RQ's ids hold only letters, digits, ``-``
    and ``_``, so the namespace itself cannot be one), and ``-``."""
    validate_scope(namespace, prefix)
    data = f"{len(prefix)}:{prefix}{namespace}".encode()
    return f"rhc-{hashlib.blake2b(data, digest_size=10).hexdigest()}-"


def tenant_queue(queue: str, namespace: str) -> str:
    """The name of ``namespace``'s own compaction queue, beside the shared queue ``queue``."""
    return f"{queue}:{namespace}"


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """Every key of one conversation, all in one hash slot."""

    msgs: str
    meta: str
    archive: str
    lock: str
    stage: str
    """What ``msgs`` is renamed to while a staged append's envelopes land (``lua/append-5.lua``)."""
    summaries: str
    """A ``HistoryManager``'s shared summaries (``redis_history/store/summaries.py``)."""
    extraction: str
    """Where memory extraction has reached (``redis_history/memory/extraction.py``)."""
    extract_claim: str
    """The token of the memory extraction run under way."""

    @classmethod
    def build(
        cls,
        conversation_id: str,
        namespace: str = DEFAULT_NAMESPACE,
        prefix: str = DEFAULT_PREFIX,
    ) -> ConversationKeys:
        """Validate the names and build the keys."""
        validate_name(conversation_id, "conversation id")
        validate_scope(namespace, prefix)
        base = f"{prefix}:{namespace}:{{{conversation_id}}}"
        return cls(
            msgs=f"{base}:msgs",
            meta=f"{base}:meta",
            archive=f"{base}:archive",
            lock=f"{base}:lock",
            stage=f"{base}:stage",
            summaries=f"{base}:summaries",
            extraction=f"{base}:extraction",
            extract_claim=f"{base}:xclaim",
        )

    @property
    def data(self) -> tuple[str, str, str]:
        """The keys holding the conversation (the lock is not data); a sliding TTL covers these."""
        return (self.msgs, self.meta, self.archive)

    def restoring(self, token: str) -> tuple[str, str, str]:
        """Where an import or a fork named ``token`` stages the list, the meta hash and the
        archive before ``lua/restore-8.lua`` renames them over the conversation's keys (same
        hash tag, so one slot)."""
        if not token.isalnum():
            raise ValueError(f"a staging token is letters and digits, got {token!r}")
        staged = f"{self.msgs.removesuffix(':msgs')}:restore:{token}"
        return f"{staged}:msgs", f"{staged}:meta", f"{staged}:archive"

    @property
    def all(self) -> tuple[str, ...]:
        """Every key, for ``delete()`` (``stage`` never outlives a transaction, but a
        conversation deleted is deleted whole)."""
        return (
            self.msgs,
            self.meta,
            self.archive,
            self.lock,
            self.stage,
            self.summaries,
            self.extraction,
            self.extract_claim,
        )


@dataclass(frozen=True, slots=True)
class MemoryKeys:
    """Every key of one owner's long-term memories (an agent, or an agent and one user), all
    in one hash slot, so a recall is one script on one node.

    With prefix ``rh``, namespace ``NS``, agent ``A`` and user ``U`` (``{A}`` for the agent's
    memories kept without a user)::

        rh:NS:mem:{A:U}:stats    HASH  seq (the last id), docs (memories), len (their terms),
                                       and notes of stores and forgets not finished
        rh:NS:mem:{A:U}:docs     HASH  id -> the memory's record (JSON: text, metadata, terms)
        rh:NS:mem:{A:U}:dedup    HASH  hash of the normalized text -> id
        rh:NS:mem:{A:U}:recent   ZSET  id -> last stored (ms), the recency order
        rh:NS:mem:{A:U}:c:<conv> SET   ids of the memories stored from a conversation
        rh:NS:mem:{A:U}:g:<tag>  SET   ids of the memories carrying a tag
        rh:NS:mem:{A:U}:t:<term> HASH  id -> length * 1000 + term frequency (the postings)
        rh:NS:mem:{A:U}:vec      VECTORSET  id -> the memory's vector (Redis 8)
        rh:NS:mem:{A:U}:vecs     HASH  id -> the memory's vector, float32 (Redis 6.2 and 7)
        rh:NS:mem:{A:U}:used     ZSET  id -> last stored or recalled (ms), the cap's order
        rh:NS:mem:{A:U}:expires  ZSET  id -> when it expires (ms), memories with a TTL
        rh:NS:mem:{A:U}:past     ZSET  id -> when it was superseded (ms); its record stays
                                       in docs, pointing to its successor

    The agent id may not contain ``:`` (so ``{A:U}`` names one owner); the user id may.
    """

    base: str
    stats: str
    docs: str
    dedup: str
    recent: str

    @classmethod
    def build(
        cls,
        agent_id: str,
        user_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        prefix: str = DEFAULT_PREFIX,
    ) -> MemoryKeys:
        """Validate the names and build the owner's keys."""
        validate_name(agent_id, "agent id", allow_colon=False)
        validate_scope(namespace, prefix)
        owner = agent_id if user_id is None else f"{agent_id}:{validate_name(user_id, 'user id')}"
        base = f"{prefix}:{namespace}:mem:{{{owner}}}"
        return cls(base, f"{base}:stats", f"{base}:docs", f"{base}:dedup", f"{base}:recent")

    def conversation(self, conversation_id: str) -> str:
        """The set of the memories stored from ``conversation_id``."""
        return f"{self.base}:c:{validate_name(conversation_id, 'conversation id')}"

    def tag(self, tag: str) -> str:
        """The set of the memories carrying ``tag``."""
        return f"{self.base}:g:{validate_name(tag, 'tag')}"

    def term(self, term: str) -> str:
        """The postings of ``term`` (a term of the tokenizer: word characters only)."""
        return f"{self.base}:t:{term}"

    @property
    def owned(self) -> tuple[str, str, str, str]:
        """The stats, docs, dedup and recent keys, in the order the write scripts take them."""
        return (self.stats, self.docs, self.dedup, self.recent)

    @property
    def vectors(self) -> str:
        """The vector set of the owner's memories (a server with vector sets)."""
        return f"{self.base}:vec"

    @property
    def vector_blobs(self) -> str:
        """The hash of the owner's memories' vectors (a server without vector sets)."""
        return f"{self.base}:vecs"

    @property
    def used(self) -> str:
        """The owner's memories by when they were last stored or recalled: the least recently
        used is the first a capped owner evicts."""
        return f"{self.base}:used"

    @property
    def expires(self) -> str:
        """The owner's memories that have a time to live, by when they expire."""
        return f"{self.base}:expires"

    @property
    def past(self) -> str:
        """The owner's superseded memories, by when they were superseded."""
        return f"{self.base}:past"

    @property
    def lifetimes(self) -> tuple[str, str, str]:
        """The used, expires and past keys, in the order the write scripts take them."""
        return (self.used, self.expires, self.past)
