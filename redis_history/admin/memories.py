"""``redis-history memory reindex``: bring the long-term memories of a namespace up to date.

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
from redis_history.memory.embedders import AsyncEmbedder, Embedder, resolve_embedder
from redis_history.memory.redis_memory import RedisLongTermMemory
from redis_history.store.keys import glob_escape

__all__ = ["Reindexed", "memory_owners", "reindex_memories"]


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
