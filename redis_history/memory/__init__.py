"""Long-term memory: what an agent keeps across conversations and recalls into a request.

:class:`LongTermMemory` is the protocol (``store``, ``recall``); :class:`InMemoryMemory`
keeps it in a process, :class:`RedisLongTermMemory` on plain Redis or Redis Cluster (BM25
over an inverted index, every write one script: ``lua/memory_*.lua``), and
:class:`AsyncRedisLongTermMemory` the same on an asyncio client. The context layer's
:class:`~redis_history.context.HistoryManager` recalls from one into its requests.
"""

from __future__ import annotations

from redis_history.memory.base import (
    AsyncLongTermMemory,
    InMemoryMemory,
    LongTermMemory,
    MemoryFilters,
    MemoryRecord,
    resolve_memory,
)
from redis_history.memory.redis_memory import AsyncRedisLongTermMemory, RedisLongTermMemory

__all__ = [
    "AsyncLongTermMemory",
    "AsyncRedisLongTermMemory",
    "InMemoryMemory",
    "LongTermMemory",
    "MemoryFilters",
    "MemoryRecord",
    "RedisLongTermMemory",
    "resolve_memory",
]
