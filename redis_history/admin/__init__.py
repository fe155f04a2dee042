"""What an operator does to a deployment without writing a pod: list and inspect
conversations, export and import them, check the deployment's health, and write a tenant's
ACL rule. The ``redis-history`` command line only parses arguments and prints what these
return; each is usable from Python too.

- :mod:`~redis_history.admin.target`: the store, namespace and prefix a command works on.
- :mod:`~redis_history.admin.listing`: ``ls``, ``stats`` and ``namespaces``.
- :mod:`~redis_history.admin.dump`: ``export`` and ``import``.
- :mod:`~redis_history.admin.memories`: ``memory reindex``.
- :mod:`~redis_history.admin.doctor`: ``doctor``.
- :mod:`~redis_history.admin.acl`: ``acl``.
- :mod:`~redis_history.admin.scripts`: ``load-scripts``.
"""

from __future__ import annotations

from redis_history.admin.acl import setuser_command, tenant_rule
from redis_history.admin.doctor import Check, Report, diagnose, doctor
from redis_history.admin.dump import (
    Dump,
    DumpMeta,
    check_dump,
    export_conversation,
    import_conversation,
    load_dump,
    read_dump,
    restore,
    write_dump,
)
from redis_history.admin.listing import (
    ConversationInfo,
    ConversationStats,
    NamespaceInfo,
    conversation_ids,
    conversation_stats,
    list_conversations,
    list_namespaces,
)
from redis_history.admin.memories import Reindexed, memory_owners, reindex_memories
from redis_history.admin.scripts import Loaded, load_scripts
from redis_history.admin.target import Target

__all__ = [
    "Check",
    "ConversationInfo",
    "ConversationStats",
    "Dump",
    "DumpMeta",
    "Loaded",
    "NamespaceInfo",
    "Reindexed",
    "Report",
    "Target",
    "check_dump",
    "conversation_ids",
    "conversation_stats",
    "diagnose",
    "doctor",
    "export_conversation",
    "import_conversation",
    "list_conversations",
    "list_namespaces",
    "load_dump",
    "load_scripts",
    "memory_owners",
    "read_dump",
    "reindex_memories",
    "restore",
    "setuser_command",
    "tenant_rule",
    "write_dump",
]
