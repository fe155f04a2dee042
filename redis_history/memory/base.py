"""Long-term memory: facts kept across conversations, recalled into the system message.

A :class:`LongTermMemory` stores texts with metadata and recalls the ones nearest a query,
among those a :class:`MemoryFilters` allows. :class:`InMemoryMemory` is the reference
implementation, for tests and single-process use: it ranks by shared words, newest first on a
tie. :class:`~redis_history.memory.redis_memory.RedisLongTermMemory` keeps them in Redis
(BM25 over an index in Redis) behind the same protocol;
:func:`resolve_memory` takes an object, ``"in_memory"`` or a dotted path, as the other plug-ins.

Every stored text carries the metadata keys of :class:`MemoryFilters` (``agent_id``,
``user_id``, ``conversation_id``, ``tags``), so a recall for one agent or user never sees
another's memories.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from redis_history import limits
from redis_history.plugins import PluginKind

__all__ = [
    "AsyncLongTermMemory",
    "InMemoryMemory",
    "LongTermMemory",
    "MemoryFilters",
    "MemoryRecord",
    "resolve_memory",
]


def tag_tuple(tags: object, what: str = "tags") -> tuple[str, ...]:
    """``tags`` (a list, tuple, set or frozenset of strings, or ``None`` for none) as a tuple,
    each tag once, in order; read once, so nothing is lost however it was built.

    Raises:
        TypeError: a bare string (it would be read as its characters), a generator or any
            other type, or a tag that is not a string.
    """
    if tags is None:
        return ()
    if not isinstance(tags, list | tuple | set | frozenset):
        raise TypeError(
            f"{what} must be a list, tuple, set or frozenset of strings, got {type(tags).__name__}"
        )
    for tag in tags:
        if not isinstance(tag, str):
            raise TypeError(f"{what} must be strings, got {tag!r}")
    return tuple(dict.fromkeys(tags))


@dataclass(frozen=True, slots=True)
class MemoryFilters:
    """Which memories a recall may return: those whose metadata match every field given.

    Raises:
        TypeError: ``tags`` is not a list, tuple, set or frozenset of strings (it is kept as
            a tuple).
    """

    agent_id: str
    """The agent whose memories these are; always required, so recall never crosses agents."""
    user_id: str | None = None
    """Only this user's memories, when given."""
    conversation_id: str | None = None
    """Only this conversation's memories, when given."""
    tags: tuple[str, ...] = ()
    """Only memories carrying every one of these tags."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", tag_tuple(self.tags, "MemoryFilters.tags"))

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """Whether a memory with ``metadata`` passes these filters."""
        if metadata.get("agent_id") != self.agent_id:
            return False
        for key in ("user_id", "conversation_id"):
            wanted = getattr(self, key)
            if wanted is not None and metadata.get(key) != wanted:
                return False
        tags = metadata.get("tags") or ()
        return all(tag in tags for tag in self.tags)

    def metadata(self) -> dict[str, Any]:
        """The metadata a memory stored under these filters carries (``None`` fields left out)."""
        out: dict[str, Any] = {"agent_id": self.agent_id}
        if self.user_id is not None:
            out["user_id"] = self.user_id
        if self.conversation_id is not None:
            out["conversation_id"] = self.conversation_id
        if self.tags:
            out["tags"] = list(self.tags)
        return out


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One recalled memory."""

    text: str
    """What was stored."""
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Its metadata, as stored."""
    score: float = 0.0
    """How near the query it is; higher is nearer (the scale is the memory's own)."""
    memory_id: str | None = None
    """The id its ``store`` returned, when the memory gives it."""


@runtime_checkable
class LongTermMemory(Protocol):
    """Stores texts and recalls the ones nearest a query."""

    def store(self, text: str, metadata: Mapping[str, Any]) -> str:
        """Keep ``text`` with ``metadata``; returns the memory's id."""
        ...

    def recall(self, query: str, filters: MemoryFilters, top_k: int) -> list[MemoryRecord]:
        """At most ``top_k`` memories ``filters`` allows, nearest ``query`` first."""
        ...


@runtime_checkable
class AsyncLongTermMemory(Protocol):
    """:class:`LongTermMemory` with coroutines, for asyncio pods (the manager's coroutines
    await it)."""

    async def store(self, text: str, metadata: Mapping[str, Any]) -> str:
        """Keep ``text`` with ``metadata``; returns the memory's id."""
        ...

    async def recall(self, query: str, filters: MemoryFilters, top_k: int) -> list[MemoryRecord]:
        """At most ``top_k`` memories ``filters`` allows, nearest ``query`` first."""
        ...


_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(text)}


class InMemoryMemory:
    """A :class:`LongTermMemory` in a list: word-overlap ranking, newest first on a tie.

    The score is the share of the query's distinct words a memory contains (0 to 1). Every
    memory the filters allow is a candidate, as in a vector search: a recall returns
    ``top_k`` of them whenever there are that many, the nearest first.
    """

    def __init__(self) -> None:
        self._items: list[tuple[str, str, Mapping[str, Any]]] = []
        self._ids = count(1)

    def store(self, text: str, metadata: Mapping[str, Any]) -> str:
        """Keep ``text`` with a copy of ``metadata``; returns its id (``"m1"``, ``"m2"``, …).

        Raises:
            ValueError: ``metadata`` has no ``agent_id``.
            TypeError: its ``tags`` are not a list, tuple, set or frozenset of strings.
        """
        if not metadata.get("agent_id"):
            raise ValueError("a memory's metadata needs an agent_id")
        stored = dict(metadata)
        if "tags" in stored:
            stored["tags"] = list(tag_tuple(stored["tags"]))
        memory_id = f"m{next(self._ids)}"
        self._items.append((memory_id, text, MappingProxyType(stored)))
        return memory_id

    def recall(self, query: str, filters: MemoryFilters, top_k: int) -> list[MemoryRecord]:
        """At most ``top_k`` memories ``filters`` allows, by share of the query's words.

        Raises:
            TypeError: ``top_k`` is not an integer.
            ValueError: ``top_k`` is negative.
        """
        top_k = limits.count(top_k, "top_k")
        wanted = _words(query)
        scored = [
            (len(wanted & _words(text)) / len(wanted) if wanted else 0.0, order, memory_id)
            for order, (memory_id, text, metadata) in enumerate(self._items)
            if filters.matches(metadata)
        ]
        scored.sort(key=lambda item: (-item[0], -item[1]))
        return [
            MemoryRecord(self._items[order][1], self._items[order][2], score, memory_id)
            for score, order, memory_id in scored[:top_k]
        ]

    def all(self) -> Sequence[tuple[str, str, Mapping[str, Any]]]:
        """Every stored memory: its id, text and metadata, oldest first."""
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"InMemoryMemory({len(self._items)} memories)"


_EXPECTED = (
    "a LongTermMemory (an object with store(text, metadata) and recall(query, filters, "
    "top_k)), 'in_memory', or a dotted path 'package.module:attr' to a memory, its class "
    "or a zero-argument factory"
)

_KIND: PluginKind[LongTermMemory] = PluginKind(
    LongTermMemory, "LongTermMemory", "long-term memory", "recall", lambda: _EXPECTED
)


def resolve_memory(spec: LongTermMemory | str | type) -> LongTermMemory:
    """The long-term memory ``spec`` names.

    Args:
        spec: A :class:`LongTermMemory` (returned as is; a class is instantiated),
            ``"in_memory"`` for a new :class:`InMemoryMemory`, or a dotted path
            ``package.module:attr`` to a memory, its class or a zero-argument factory.

    Raises:
        ValueError: A name that is no alias nor an importable path.
        TypeError: An object (or what a path names) that is not a ``LongTermMemory``.
    """
    return _KIND.resolve(spec, {"in_memory": InMemoryMemory})
