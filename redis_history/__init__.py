"""redis-history: LLM agent conversation history in Redis, shared by many pods.

Import the public names from here; modules other than this one are internal
unless documented.
"""

from __future__ import annotations

from redis_history.compaction.compactors import (
    Compactor,
    CompactorRequest,
    SummarizingCompactor,
    ToolOutputElider,
    resolve_compactor,
)
from redis_history.compaction.run import CompactionResult, run_compaction
from redis_history.compaction.summarizers import (
    ExtractiveSummarizer,
    OpenAICompatibleSummarizer,
    Summarizer,
    resolve_summarizer,
)
from redis_history.compaction_policy import CompactionContext, CompactionPolicy
from redis_history.compaction_state import CompactionState
from redis_history.errors import (
    AccessDeniedError,
    BudgetExceededError,
    CompactorError,
    ConversationExistsError,
    ConversationNotFoundError,
    CorruptHistoryError,
    DumpError,
    DumpVersionError,
    EmbedderMismatchError,
    EmbeddingError,
    EncodingUnavailableError,
    EndpointError,
    ExtractionError,
    HistoryError,
    InvalidMediaError,
    InvalidMessageError,
    InvalidTransitionError,
    JobRefusedError,
    LimitExceededError,
    LockLostError,
    MessageNotFoundError,
    MessageTooLargeError,
    ReplicationError,
    RoleOrderError,
    ScriptsNotLoadedError,
    StaleSnapshotError,
    StoreUnavailableError,
    SummarizerError,
    ToolPairingError,
    UnindexedMemoryError,
    UnsupportedClientError,
    UnsupportedPartError,
)
from redis_history.models import Message, Role, ToolCall
from redis_history.store.base import AsyncHistory, History
from redis_history.store.codec import Entry
from redis_history.store.core import CompactionRequest, CompactionStats, TranscriptPage
from redis_history.store.history import AsyncRedisHistory, RedisHistory
from redis_history.store.options import HistoryOptions
from redis_history.tokens import (
    EstimatingCounter,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
)
from redis_history.turns import (
    ToolPair,
    ToolStep,
    Turn,
    from_turns,
    group_turns,
    to_messages,
)

__all__ = [
    "AccessDeniedError",
    "AsyncHistory",
    "AsyncRedisHistory",
    "BudgetExceededError",
    "CompactionContext",
    "CompactionPolicy",
    "CompactionRequest",
    "CompactionResult",
    "CompactionState",
    "CompactionStats",
    "Compactor",
    "CompactorError",
    "CompactorRequest",
    "ConversationExistsError",
    "ConversationNotFoundError",
    "CorruptHistoryError",
    "DumpError",
    "DumpVersionError",
    "EmbedderMismatchError",
    "EmbeddingError",
    "EncodingUnavailableError",
    "EndpointError",
    "Entry",
    "EstimatingCounter",
    "ExtractionError",
    "ExtractiveSummarizer",
    "HeuristicCounter",
    "History",
    "HistoryError",
    "HistoryOptions",
    "InvalidMediaError",
    "InvalidMessageError",
    "InvalidTransitionError",
    "JobRefusedError",
    "LimitExceededError",
    "LockLostError",
    "Message",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "OpenAICompatibleSummarizer",
    "RedisHistory",
    "ReplicationError",
    "Role",
    "RoleOrderError",
    "ScriptsNotLoadedError",
    "StaleSnapshotError",
    "StoreUnavailableError",
    "Summarizer",
    "SummarizerError",
    "SummarizingCompactor",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCall",
    "ToolOutputElider",
    "ToolPair",
    "ToolPairingError",
    "ToolStep",
    "TranscriptPage",
    "Turn",
    "UnindexedMemoryError",
    "UnsupportedClientError",
    "UnsupportedPartError",
    "from_turns",
    "group_turns",
    "resolve_compactor",
    "resolve_summarizer",
    "run_compaction",
    "to_messages",
]
