"""The one place Redis key names are built.

With prefix ``rh``, namespace ``NS`` and conversation ``C``::

    rh:NS:{C}:msgs     LIST    message envelopes
    rh:NS:{C}:meta     HASH    token accounting, role state, version, compaction state
    rh:NS:{C}:archive  LIST    originals replaced by summaries
    rh:NS:{C}:lock     STRING  compaction lock
    rh:NS:{C}:stage    LIST    msgs, renamed for the moment a large append lands (inside
                               one MULTI/EXEC: never seen outside it; one left there by
                               anything else is deleted by the next staged append)

The meta hash's fields: ``total`` (tokens of the live messages), ``baseline`` and
``mark`` (the LLM's reported input tokens and the total when it was recorded),
``role`` and ``open`` (the last role and the unanswered tool call ids), ``version``
(bumped by every rewrite: replace, splice, truncate, rollback; appends only grow the
list, so version and length together name the content), ``ops`` (the last 32 writes
other than appends, 10 bytes each: the write's 6-byte operation token and its result
as a 4-byte integer; so a retried write is applied once), ``opa`` (the last 32 appends'
tokens, 6 bytes each), ``ttl`` (the conversation's TTL in ms,
which every writer applies), ``abytes`` and ``adropped`` (the archive's size, and
how many archived entries its caps dropped), ``cstate``, ``compactions`` and
``tokens_freed`` (compaction), and ``queued`` and ``queued_at`` (the pending-
compaction claim).

The braces make the conversation id the hash tag, so every script touches one
cluster slot; the namespace comes first so an ACL key pattern such as
``~rh:tenant-a:*`` confines a tenant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEFAULT_NAMESPACE", "DEFAULT_PREFIX", "ConversationKeys", "MemoryKeys", "validate_name"]

DEFAULT_PREFIX = "rh"
DEFAULT_NAMESPACE = "default"
MAX_NAME_LENGTH = 200

_FORBIDDEN = re.compile(r"[{}\x00-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")


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


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """Every key of one conversation, all in one hash slot."""

    msgs: str
    meta: str
    archive: str
    lock: str
    stage: str
    """What ``msgs`` is renamed to while a staged append's envelopes land (``lua/append-4.lua``)."""

    @classmethod
    def build(
        cls,
        conversation_id: str,
        namespace: str = DEFAULT_NAMESPACE,
        prefix: str = DEFAULT_PREFIX,
    ) -> ConversationKeys:
        """Validate the names and build the keys."""
        validate_name(conversation_id, "conversation id")
        validate_name(namespace, "namespace", allow_colon=False)
        validate_name(prefix, "key prefix", allow_colon=False)
        base = f"{prefix}:{namespace}:{{{conversation_id}}}"
        return cls(
            msgs=f"{base}:msgs",
            meta=f"{base}:meta",
            archive=f"{base}:archive",
            lock=f"{base}:lock",
            stage=f"{base}:stage",
        )

    @property
    def data(self) -> tuple[str, str, str]:
        """The keys holding the conversation (the lock is not data); a sliding TTL covers these."""
        return (self.msgs, self.meta, self.archive)

    @property
    def all(self) -> tuple[str, str, str, str, str]:
        """Every key, for ``delete()`` (``stage`` never outlives a transaction, but a
        conversation deleted is deleted whole)."""
        return (self.msgs, self.meta, self.archive, self.lock, self.stage)


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
        validate_name(namespace, "namespace", allow_colon=False)
        validate_name(prefix, "key prefix", allow_colon=False)
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
