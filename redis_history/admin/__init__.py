"""What an operator does to a deployment without writing a pod: list and inspect
conversations, export and import them, delete one, check the deployment's health, and write
a tenant's ACL rule. The ``redis-history`` command line only parses arguments and prints
what these return; each module is usable from Python too.

- :mod:`~redis_history.admin.target`: the store, namespace and prefix a command works on.
- :mod:`~redis_history.admin.listing`: ``ls`` and ``stats``.
"""

from __future__ import annotations

from redis_history.admin.listing import (
    ConversationInfo,
    ConversationStats,
    conversation_ids,
    conversation_stats,
    list_conversations,
)
from redis_history.admin.target import Target

__all__ = [
    "ConversationInfo",
    "ConversationStats",
    "Target",
    "conversation_ids",
    "conversation_stats",
    "list_conversations",
]
