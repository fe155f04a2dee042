"""``redis-history memory reindex``: embed the long-term memories of a namespace.

Memories stored before their owner had an embedder have no vector, and are recalled by
keywords only until a recall embeds them (a batch at a time) or this does: every owner the
namespace holds (found by ``SCAN`` on every primary), each batch one atomic write. With
``rebuild``, each owner's vectors are dropped first and all made again by the embedder
given, which is how a namespace changes embedders.
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
    """One owner's memories embedded by :func:`reindex_memories`."""

    agent_id: str
    user_id: str | None
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
    target: Target, embedder: Embedder | AsyncEmbedder | str, *, rebuild: bool = False
) -> list[Reindexed]:
    """Embed every memory without a vector of every owner of the target's namespace (all of
    them again, with ``rebuild``), by ``embedder``.

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
        Reindexed(agent, user, memory.reindex(agent, user, rebuild=rebuild))
        for agent, user in memory_owners(target)
    ]
