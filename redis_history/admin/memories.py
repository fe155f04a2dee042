"""``redis-history memory``: bring the long-term memories of a namespace up to date
(``reindex``), list an owner's with their provenance (``ls``), and forget every memory of a
user (``forget``).

Memories an earlier version indexed by other terms (``TERMS`` in redis_history.memory.redis_memory)
are indexed again before their owner's next recall, or by this; memories stored before their
owner had an embedder have no vector, and are recalled by keywords only until a recall embeds
them (a batch at a time) or this does. Every owner the namespace holds (found by ``SCAN`` on
every primary), each batch one atomic write. With ``rebuild``, each owner's vectors are
dropped first and all made again by the embedder given, which is how a namespace changes
embedders.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis_history.admin.listing import scan
from redis_history.admin.target import Target
from redis_history.memory.base import MemoryFilters, MemoryRecord
from redis_history.memory.embedders import AsyncEmbedder, Embedder, resolve_embedder
from redis_history.memory.redis_memory import RedisLongTermMemory
from redis_history.store.keys import glob_escape

__all__ = [
    "Forgotten",
    "Reindexed",
    "forget_user",
    "list_memories",
    "memory_owners",
    "reindex_memories",
]


@dataclass(frozen=True)
class Reindexed:
    """One owner's memories indexed again and embedded by :func:`reindex_memories`."""

    agent_id: str
    user_id: str | None
    indexed: int
    embedded: int


def memory_owners(target: Target) -> list[tuple[str, str | None]]:
    """Every owner (agent, user or ``None``) with memories in the target's namespace, sorted."""
    pattern = f"{glob_escape(target.prefix)}:{glob_escape(target.namespace)}:mem:{{*}}:stats"
    owners: set[tuple[str, str | None]] = set()
    for key in scan(target, pattern):
        text = key.decode("utf-8", "replace")
        owner = text[text.index("{") + 1 : text.rindex("}")]
        agent, colon, user = owner.partition(":")
        owners.add((agent, user if colon else None))
    return sorted(owners, key=lambda owner: (owner[0], owner[1] or ""))


def reindex_memories(
    target: Target, embedder: Embedder | AsyncEmbedder | str | None, *, rebuild: bool = False
) -> list[Reindexed]:
    """Index again every memory an earlier version indexed, and embed every memory without a
    vector (all of them again, with ``rebuild``) by ``embedder`` (``None``: keywords only),
    of every owner of the target's namespace.

    Raises:
        EmbedderMismatchError: an owner's vectors are another embedder's (without
            ``rebuild``); the owners before it are done.
        EmbeddingError: the embedder failed.
    """
    resolved = resolve_embedder(embedder)
    memory = RedisLongTermMemory(
        target.client, namespace=target.namespace, prefix=target.prefix, embedder=resolved
    )
    return [
        Reindexed(agent, user, *memory.reindex(agent, user, rebuild=rebuild))
        for agent, user in memory_owners(target)
    ]


@dataclass(frozen=True)
class Forgotten:
    """One owner forgotten by :func:`forget_user`: the memories removed, and the keys left
    behind (by a store that ran meanwhile) that the sweep of the owner's key pattern found."""

    agent_id: str
    user_id: str
    memories: int
    swept: int


def forget_user(target: Target, user_id: str, agent_id: str | None = None) -> list[Forgotten]:
    """Remove every memory of ``user_id`` (under ``agent_id`` only, if given) in the target's
    namespace, and every key that names them: each owner is forgotten by
    :meth:`~redis_history.memory.RedisLongTermMemory.forget_owner`, then its key pattern is
    swept on every primary (``SCAN``), so a key a store left meanwhile goes too. Afterwards no
    key of the namespace names the user as an owner.

    Raises:
        ValueError: an unusable name.
        CorruptHistoryError: a record is not what the memory writes.
    """
    memory = RedisLongTermMemory(target.client, namespace=target.namespace, prefix=target.prefix)
    memory.keys(agent_id or "agent", user_id)  # the names checked before anything is read
    agent = "*" if agent_id is None else glob_escape(agent_id)
    base = f"{glob_escape(target.prefix)}:{glob_escape(target.namespace)}:mem:"
    pattern = f"{base}{{{agent}:{glob_escape(user_id)}}}:*"

    def owned() -> dict[str, list[bytes]]:
        """The user's keys by agent (a pattern may match another user's whose id ends so)."""
        found: dict[str, list[bytes]] = {}
        for key in scan(target, pattern):
            text = key.decode("utf-8", "surrogateescape")
            owner = text[text.index("{") + 1 : text.index("}")]
            agent_of, _, user = owner.partition(":")
            if user == user_id and agent_id in (None, agent_of):
                found.setdefault(agent_of, []).append(key)
        return found

    done: list[Forgotten] = []
    for agent_of in sorted(owned()):
        forgotten = memory.forget_owner(agent_of, user_id)
        left = sorted(set(owned().get(agent_of, [])))
        for start in range(0, len(left), 500):
            target.client.unlink(*left[start : start + 500])
        done.append(Forgotten(agent_of, user_id, forgotten, len(left)))
    return done


def list_memories(
    target: Target,
    agent_id: str,
    user_id: str | None,
    limit: int,
    offset: int = 0,
    *,
    superseded: bool = False,
) -> list[MemoryRecord]:
    """The owner's memories, newest first (:meth:`RedisLongTermMemory.list`), each with its
    provenance in its metadata: ``conversation_ids`` and ``message_ids``; with
    ``superseded``, the memories updates replaced, each with ``superseded_by``."""
    memory = RedisLongTermMemory(target.client, namespace=target.namespace, prefix=target.prefix)
    who = MemoryFilters(agent_id, user_id)
    return memory.list(who, limit=limit, offset=offset, superseded=superseded)
