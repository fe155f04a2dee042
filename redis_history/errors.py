"""The exception tree of redis-history.

Every error the library raises on purpose is a :class:`HistoryError`, so one
``except HistoryError`` covers them all, and callers never need to import
redis-py's exceptions::

    HistoryError
    ├── InvalidMessageError (ValueError)     bad input; nothing was written
    │   ├── RoleOrderError                   role out of order
    │   ├── ToolPairingError                 tool result without an open call, or calls left open
    │   ├── MessageTooLargeError             envelope over ``max_message_bytes``
    │   └── InvalidMediaError                media bytes that are not what they claim, or cut short
    │   └── UnsupportedPartError             a content part the wire format cannot carry
    ├── LimitExceededError (ValueError)      an input over a documented limit; nothing was written
    ├── StaleSnapshotError                   the prefix a write-back summarized has changed
    ├── LockLostError                        a fenced write-back no longer holds the lock
    ├── InvalidTransitionError (ValueError)       a compaction-state event its state does not allow
    ├── BudgetExceededError (ValueError)     the parts a request must keep do not fit its budget
    ├── ConversationNotFoundError (KeyError)      no such conversation
    ├── MessageNotFoundError (KeyError)      no live message has the id given
    ├── ConversationExistsError              an import or a fork would overwrite a conversation
    ├── UnsupportedClientError (ValueError)  a Redis client that decodes replies to text
    ├── DumpError (ValueError)               a dump that is not what export writes; nothing written
    │   └── DumpVersionError                 a dump from a newer format version
    ├── CorruptHistoryError                  stored data that is not a valid envelope or meta hash
    ├── EncodingUnavailableError (RuntimeError)  packaged tokenizer data missing or corrupt
    ├── SummarizerError                      a summarizer failed: HTTP error, timeout, bad reply
    ├── CompactorError                       a compactor's replacement was refused before writing
    ├── JobRefusedError (PermissionError)    a worker was handed a job it may not run
    ├── ReplicationError                     a write reached fewer replicas than ``wait_replicas``
    ├── AccessDeniedError (PermissionError)  credentials refused, or a key denied (ACL NOPERM)
    └── StoreUnavailableError (ConnectionError)  Redis could not be reached; wraps redis-py's error
        └── ScriptsNotLoadedError            the server has not the store's scripts, and the
                                             user may not load them (an operator's step)
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "BudgetExceededError",
    "CompactorError",
    "ConversationExistsError",
    "ConversationNotFoundError",
    "CorruptHistoryError",
    "DumpError",
    "DumpVersionError",
    "EmbedderMismatchError",
    "EmbeddingError",
    "EncodingUnavailableError",
    "EndpointError",
    "ExtractionError",
    "HistoryError",
    "InvalidMediaError",
    "InvalidMessageError",
    "InvalidTransitionError",
    "JobRefusedError",
    "LimitExceededError",
    "LockLostError",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "ReplicationError",
    "RoleOrderError",
    "ScriptsNotLoadedError",
    "StaleSnapshotError",
    "StoreUnavailableError",
    "SummarizerError",
    "ToolPairingError",
    "UnindexedMemoryError",
    "UnsupportedClientError",
    "UnsupportedPartError",
]


class HistoryError(Exception):
    """Root of every error redis-history raises; carries the conversation it concerns and,
    for a message or stored entry, its index (in the batch, or in the stored list)."""

    def __init__(
        self,
        message: str,
        *,
        index: int | None = None,
        conversation_id: str | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.index = index
        self.conversation_id = conversation_id
        self.namespace = namespace

    def __str__(self) -> str:
        if self.conversation_id is None:
            return self.message
        return f"{self.message} (conversation {self.namespace}/{self.conversation_id})"


class InvalidMessageError(HistoryError, ValueError):
    """A message (or batch) was refused by validation; Redis was left unchanged."""


class RoleOrderError(InvalidMessageError):
    """A message's role may not follow the conversation's last role."""


class ToolPairingError(InvalidMessageError):
    """A tool result answers no open tool call, or tool calls are still unanswered."""


class MessageTooLargeError(InvalidMessageError):
    """A serialized message is larger than the history's ``max_message_bytes``."""


class InvalidMediaError(InvalidMessageError):
    """Media bytes (an image's header, a document's signature) that are not a format
    redis-history reads, that are truncated or malformed, or whose signature contradicts
    the media type given with them; the message says what is wrong.

    ``media_type`` is the type the bytes were taken for (``"image/jpeg"``), ``None`` when
    their first bytes match no known format.
    """

    def __init__(
        self, message: str, *, media_type: str | None = None, index: int | None = None
    ) -> None:
        super().__init__(message, index=index)
        self.media_type = media_type


class UnsupportedPartError(InvalidMessageError):
    """A content part that a wire format cannot carry (audio for Anthropic, a file by URL for
    chat completions): ``part`` is its type (``"audio"``), ``format`` the wire format."""

    def __init__(self, message: str, *, part: str, format: str, index: int | None = None) -> None:
        super().__init__(message, index=index)
        self.part = part
        self.format = format


class LimitExceededError(HistoryError, ValueError):
    """An input over one of the store's documented limits (``redis_history.limits``): a
    batch, a count, a TTL, or the bytes a rewrite would read; nothing was written.

    ``limit`` names what was over, ``maximum`` is its limit (``None`` where the script
    measured it and said so in the message).
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str | None = None,
        maximum: int | None = None,
        index: int | None = None,
        conversation_id: str | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__(message, index=index, conversation_id=conversation_id, namespace=namespace)
        self.limit = limit
        self.maximum = maximum


class StaleSnapshotError(HistoryError):
    """The prefix a caller summarized is no longer the conversation's prefix."""


class LockLostError(HistoryError):
    """A fenced write-back was refused: the caller's lock token is not the current one."""


class InvalidTransitionError(HistoryError, ValueError):
    """A compaction-state event the current state does not allow (e.g. exhausting while cooling)."""


class BudgetExceededError(HistoryError, ValueError):
    """The parts a request must keep (the system message, the current turn, the reserve for
    the reply) need more tokens than its budget; nothing older was left to drop.

    ``budget`` is the budget given, ``required`` what the kept parts and the reserve need,
    and ``parts`` their tokens by name (e.g. ``{"system": 120, "current_turn": 4100,
    "reserve": 1024}``), so a caller can tell what to shrink.
    """

    def __init__(self, message: str, *, budget: int, required: int, parts: dict[str, int]) -> None:
        super().__init__(message)
        self.budget = budget
        self.required = required
        self.parts = dict(parts)


class ConversationNotFoundError(HistoryError, KeyError):
    """The conversation does not exist."""

    def __str__(self) -> str:
        return HistoryError.__str__(self)


class MessageNotFoundError(HistoryError, KeyError):
    """No live message of the conversation has the id given (a fork's ``at``): never stored,
    removed, or moved to the archive by a compaction."""

    def __str__(self) -> str:
        return HistoryError.__str__(self)


class ConversationExistsError(HistoryError):
    """An import or a fork would write a conversation that exists (an import that was not told
    to replace it); nothing was written."""


class UnsupportedClientError(HistoryError, ValueError):
    """A Redis client the store cannot use: one made with ``decode_responses=True``, which
    turns every reply into text, where the store reads bytes that are not UTF-8 (a long text
    kept compressed, the data of a content part). Refused when the history, memory or
    queue is made, before anything is sent."""


class DumpError(HistoryError, ValueError):
    """A dump that is not what an export writes (not JSON Lines, a line that is not an entry,
    fewer entries than its header counts, a message the store would refuse); nothing was
    written. ``line`` is the dump's line it is about (1-based), when there is one."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


class DumpVersionError(DumpError):
    """A dump written in a newer format version than this redis-history reads."""


class CorruptHistoryError(HistoryError):
    """Stored data is not what redis-history wrote: a bad envelope, meta field or key type."""


class EmbedderMismatchError(HistoryError, ValueError):
    """A memory's vectors were made by another embedder (or another dimension) than the one
    given: they would not compare. Nothing was written."""


class UnindexedMemoryError(HistoryError):
    """Some of an owner's long-term memories were indexed by other terms than this version
    makes (stored by an earlier one). A recall indexes them again and retries by itself; this
    is raised only when that kept failing (``redis-history memory reindex`` does it for a whole
    namespace). Nothing was returned."""


class EncodingUnavailableError(HistoryError, RuntimeError):
    """The packaged BPE ranks of an encoding are missing, corrupt or not the expected file."""


class EndpointError(HistoryError):
    """An HTTP endpoint (a summarizer's, an embedder's) failed: an HTTP error, a timeout or a
    malformed reply.

    The API key never appears in the message. ``status`` is the last HTTP
    status (``None`` for a timeout, a connection error or a malformed body),
    ``endpoint`` the URL called and ``attempts`` how many requests were made.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        endpoint: str | None = None,
        attempts: int = 0,
        conversation_id: str | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__(message, conversation_id=conversation_id, namespace=namespace)
        self.status = status
        self.endpoint = endpoint
        self.attempts = attempts


class EmbeddingError(EndpointError):
    """An embedder could not embed: its endpoint failed, or it answered with vectors that are
    not one per text of one dimension (``status`` and ``endpoint`` then ``None``)."""


class ExtractionError(EndpointError):
    """An extractor could not extract: its endpoint failed, or it answered with something
    that is not the facts' JSON (``status`` and ``endpoint`` then ``None``)."""


class SummarizerError(EndpointError):
    """A summarizer could not produce a summary: HTTP error, timeout or malformed reply."""


class CompactorError(HistoryError):
    """A compactor returned what cannot replace the prefix it was given (not messages, or
    messages that would break role order or tool pairing with the tail); nothing was written."""


class JobRefusedError(HistoryError, PermissionError):
    """A worker was handed a job it may not run (another function, or a bound method)."""


class ReplicationError(HistoryError):
    """A write was applied on the primary, but fewer replicas than ``wait_replicas`` confirmed
    it within ``wait_timeout``: a failover now could lose it. Repeating the same call is safe
    (it is applied once) and waits again.
    """

    def __init__(
        self,
        message: str,
        *,
        acknowledged: int,
        required: int,
        conversation_id: str | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__(message, conversation_id=conversation_id, namespace=namespace)
        self.acknowledged = acknowledged
        self.required = required


class AccessDeniedError(HistoryError, PermissionError):
    """Redis refused the credentials (no password, a wrong one, a disabled user) or denied the
    user a key or a command (an ACL's ``NOPERM``); nothing was written. Not an outage: it is
    not retried, and repeating the call fails the same way until the credentials or the ACL
    change."""


class StoreUnavailableError(HistoryError, ConnectionError):
    """Redis could not be reached or timed out; the operation may not have run."""


class ScriptsNotLoadedError(StoreUnavailableError):
    """The server has neither the store's functions nor its scripts, and this user may not
    load them: a tenant's rule runs only the functions an operator loaded (``redis-history
    load-scripts``). Nothing was written; the call succeeds once they are loaded."""
