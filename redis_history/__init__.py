"""redis-history: LLM agent conversation history in Redis, shared by many pods.

Import the public names from here; modules other than this one are internal
unless documented.
"""

from __future__ import annotations

from redis_history.codec import Entry
from redis_history.errors import (
    ConversationNotFound,
    CorruptHistoryError,
    EncodingUnavailableError,
    HistoryError,
    InvalidMessageError,
    LockLostError,
    MessageTooLargeError,
    RoleOrderError,
    StaleSnapshotError,
    StoreUnavailableError,
    ToolPairingError,
)
from redis_history.history import AsyncRedisHistory, RedisHistory
from redis_history.models import Message, Role, ToolCall
from redis_history.tokens import HeuristicCounter, TiktokenCounter, TokenCounter

__all__ = [
    "AsyncRedisHistory",
    "ConversationNotFound",
    "CorruptHistoryError",
    "EncodingUnavailableError",
    "Entry",
    "HeuristicCounter",
    "HistoryError",
    "InvalidMessageError",
    "LockLostError",
    "Message",
    "MessageTooLargeError",
    "RedisHistory",
    "Role",
    "RoleOrderError",
    "StaleSnapshotError",
    "StoreUnavailableError",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCall",
    "ToolPairingError",
]
