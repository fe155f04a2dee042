"""A namespace's conversations (``redis-history ls``), one conversation's state
(``redis-history stats``), and the namespaces that hold anything (``redis-history
namespaces``).

Conversations are found with ``SCAN`` (never ``KEYS``) on every primary, by the key pattern
:func:`~redis_history.store.keys.conversation_pattern` builds; each is then read through the
store's own calls (length, token estimate and compaction state, TTL), pipelined a batch at a
time, so listing many conversations costs a round trip per batch, not per conversation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from redis_history.admin.target import Target, run_call
from redis_history.compaction_policy import GAVE_UP, CompactionFacts
from redis_history.errors import (
    AccessDeniedError,
    CorruptHistoryError,
    HistoryError,
    StoreUnavailableError,
)
from redis_history.store.codec import Entry
from redis_history.store.history import RedisHistory
from redis_history.store.keys import (
    conversation_of,
    conversation_pattern,
    glob_escape,
    validate_name,
    validate_scope,
)
from redis_history.wire import RedisFailure, resent
from redis_history.wire.call import Call
from redis_history.wire.lane import command_of, pipelined, send

__all__ = [
    "BATCH",
    "SCAN_COUNT",
    "ConversationInfo",
    "ConversationStats",
    "NamespaceInfo",
    "conversation_ids",
    "conversation_stats",
    "list_conversations",
    "list_namespaces",
]

SCAN_COUNT = 1000
"""The ``COUNT`` hint of each ``SCAN``: keys a node looks at per call."""
BATCH = 100
"""Conversations read per pipeline."""
HEAD_PAGE = 16
"""Entries read per round trip when looking for the summaries at a conversation's head."""


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """What ``ls`` shows of one conversation."""

    conversation_id: str
    namespace: str
    messages: int
    """Live messages."""
    tokens: int | None
    """The token estimate (``None`` when empty)."""
    state: str
    """The compaction state (``Ready``, ``Cooling{turns_remaining: 2}``, ...), or
    ``unreadable`` when the conversation could not be read (see :attr:`error`)."""
    ttl: float | None
    """The conversation's sliding TTL in seconds, as stored with it; ``None`` for none."""
    archived: int
    """Entries in the archive (originals replaced by summaries)."""
    error: str | None = None
    """Why the conversation could not be read (a lost meta hash, data of the wrong type)."""

    def to_json(self) -> dict[str, Any]:
        """The info as a JSON object (``error`` only when there is one)."""
        data = asdict(self)
        if data["error"] is None:
            del data["error"]
        return data


@dataclass(frozen=True, slots=True)
class ConversationStats(ConversationInfo):
    """What ``stats`` shows: :class:`ConversationInfo` and the accounting behind it."""

    baseline: int | None = None
    """The input tokens the model last reported, when recorded since the last rewrite."""
    archive_bytes: int = 0
    """The archive's size in stored bytes."""
    archive_dropped: int = 0
    """Archived entries the archive's caps have dropped."""
    version: int = 0
    """Rewrites so far (replace, splice, truncate, rollback)."""
    compactions: int = 0
    """Successful compactions so far."""
    tokens_freed: int = 0
    """Tokens those compactions removed, net of their summaries."""
    last_compaction: dict[str, Any] | None = None
    """The newest summary at the head of the live messages: when it was written
    (``at``), its ``message_id``, and, where the compactor said, the messages it
    ``covers`` and the ``tokens_replaced``; ``None`` when no summary is live."""
    stored_tokens: int = 0
    """The token total of the live messages stored (the thresholds compare the larger of it
    and the estimate)."""
    gave_up: dict[str, Any] | None = None
    """When compaction last gave up on it (``Exhausted``): the ``reason`` (``no cut``,
    ``nothing freed``, ``tail over the hard limit``) and the live messages it gave up
    ``at`` (it is tried again at twice that: ``CompactionPolicy.retry_at``); else ``None``."""
    compaction_pending: bool = False
    """Whether a compaction is claimed (queued or running) for this conversation."""
    compacting: bool = False
    """Whether a worker holds the conversation's compaction lock now."""
    expires_in: float | None = None
    """Seconds until the conversation expires unless written, ``None`` when it never does."""


def conversation_ids(target: Target, match: str = "*", limit: int | None = None) -> list[str]:
    """The ids of the target namespace's conversations whose id matches the glob ``match``,
    sorted: ``SCAN`` on every primary; with ``limit``, the first that many it finds. A key
    whose id no conversation can have (see :func:`list_conversations`) is left out.

    Raises:
        ValueError: a glob with braces, or a negative limit.
    """
    return _found(target, match, limit)[0]


def _found(
    target: Target, match: str, limit: int | None
) -> tuple[list[str], dict[str, ValueError]]:
    """The conversation ids found, sorted, and the ids found that no conversation can have
    (a key another program wrote: a control character, a brace, bytes that are not UTF-8,
    read as lone surrogates), each with why; ``limit`` counts both."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    pattern = conversation_pattern(target.namespace, target.prefix, match)
    found: dict[str, None] = {}
    foreign: dict[str, ValueError] = {}
    for key in scan(target, pattern):
        if limit is not None and len(found) + len(foreign) >= limit:
            break
        conversation = conversation_of(key, target.namespace, target.prefix)
        if conversation is None or conversation in found or conversation in foreign:
            continue
        try:
            found[validate_name(conversation, "conversation id")] = None
        except ValueError as exc:
            foreign[conversation] = exc
    return sorted(found), foreign


def scan(target: Target, pattern: str) -> Iterator[bytes]:
    """Every key matching ``pattern`` on every primary (a key may come twice)."""
    for node in target.primaries():
        try:
            yield from node.scan_iter(match=pattern, count=SCAN_COUNT)
        except RedisFailure as exc:
            raise target.wrap(exc) from exc


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """What ``namespaces`` shows of one namespace: how many conversations and owners of
    long-term memories (an agent, or an agent and a user) it holds."""

    namespace: str
    conversations: int
    memory_owners: int

    def to_json(self) -> dict[str, Any]:
        """The info as a JSON object."""
        return asdict(self)


def list_namespaces(target: Target) -> list[NamespaceInfo]:
    """Every namespace under the target's key prefix that holds a conversation or a
    long-term memory, sorted by name: one ``SCAN`` of the prefix's keys on every primary
    (the namespace of ``target`` plays no part). Keys under the prefix that no namespace
    of the store can have written (another program's) are left out.

    Raises:
        StoreUnavailableError: Redis could not be reached.
        AccessDeniedError: Redis refused the credentials, or the user may not scan.
    """
    head = f"{target.prefix}:"
    conversations: dict[str, set[str]] = {}
    owners: dict[str, set[str]] = {}
    for key in scan(target, f"{glob_escape(target.prefix)}:*:{{*}}:*"):
        text = key.decode("utf-8", "surrogateescape")
        namespace, _, rest = text[len(head) :].partition(":")
        if not _usable(namespace, target.prefix):
            continue
        if conversation := conversation_of(text, namespace, target.prefix):
            conversations.setdefault(namespace, set()).add(conversation)
        elif rest.startswith("mem:{"):
            owner, _, kind = rest.removeprefix("mem:{").partition("}:")
            if owner and kind == "stats":
                owners.setdefault(namespace, set()).add(owner)
    return [
        NamespaceInfo(
            namespace, len(conversations.get(namespace, ())), len(owners.get(namespace, ()))
        )
        for namespace in sorted(conversations.keys() | owners.keys())
    ]


def _usable(namespace: str, prefix: str) -> bool:
    try:
        validate_scope(namespace, prefix)
    except ValueError:
        return False
    return True


def list_conversations(
    target: Target, match: str = "*", limit: int | None = None
) -> list[ConversationInfo]:
    """:class:`ConversationInfo` of each conversation :func:`conversation_ids` finds, sorted
    by id.

    A conversation that cannot be read is listed with its :attr:`~ConversationInfo.error`;
    so is a key whose id no conversation can have (one another program wrote, with a
    control character, say), its id as found (bytes that are not UTF-8 as lone
    surrogates, as ``surrogateescape`` reads them), so that one such key does not hide
    the namespace's conversations.

    Raises:
        StoreUnavailableError: Redis could not be reached.
        AccessDeniedError: Redis refused the credentials or a key.
    """
    ids, foreign = _found(target, match, limit)
    infos = [
        info
        for start in range(0, len(ids), BATCH)
        for info in _infos(target, ids[start : start + BATCH])
    ]
    infos += [_foreign(target, key, why) for key, why in foreign.items()]
    return sorted(infos, key=lambda info: info.conversation_id)


def _foreign(target: Target, conversation: str, why: ValueError) -> ConversationInfo:
    """What ``ls`` shows of a key whose id no conversation can have."""
    error = f"not a conversation's key: {why}"
    return ConversationInfo(conversation, target.namespace, 0, None, "unreadable", None, 0, error)


_INFO_CALLS = 4


def _infos(target: Target, ids: Sequence[str]) -> list[ConversationInfo]:
    """The info of each of ``ids``, their reads sent in one pipeline."""
    histories = [target.history(conversation) for conversation in ids]
    calls: list[Call[Any]] = []
    for history in histories:
        core = history.core
        archived: Call[int] = Call(int, ("LLEN", history.keys.archive))
        calls += [core.compaction_status(), core.length(), core.ttl(), archived]
    results = _run_all(target, histories, calls)
    infos = []
    for i, history in enumerate(histories):
        status, length, ttl, archived_count = results[i * _INFO_CALLS : (i + 1) * _INFO_CALLS]
        failed = next((r for r in (status, length, ttl) if isinstance(r, HistoryError)), None)
        if failed is not None:
            infos.append(_unreadable(history, failed, length, archived_count))
            continue
        tokens, state = status
        infos.append(
            ConversationInfo(
                history.conversation_id,
                history.namespace,
                length,
                tokens,
                str(state),
                ttl,
                archived_count if isinstance(archived_count, int) else 0,
            )
        )
    return infos


def _unreadable(history: RedisHistory, error: HistoryError, length: Any, archived: Any) -> Any:
    return ConversationInfo(
        history.conversation_id,
        history.namespace,
        length if isinstance(length, int) else 0,
        None,
        "unreadable",
        None,
        archived if isinstance(archived, int) else 0,
        str(error.message),
    )


def _run_all(
    target: Target, histories: Sequence[RedisHistory], calls: list[Call[Any]]
) -> list[Any]:
    """Each call's result, or the ``HistoryError`` it met (a refused script, data that is
    not the store's), the calls of ``histories[i]`` being ``calls[i * n : (i + 1) * n]``.
    An outage or a denied key raises instead: it is not one conversation's problem."""
    per = len(calls) // max(len(histories), 1)
    try:
        commands = [command_of(target.client, call) for call in calls]
        replies = pipelined(target.client, commands, raise_on_error=False)
    except RedisFailure as exc:
        raise histories[0].core.wrap(exc) from exc
    results: list[Any] = []
    for index, (call, sent) in enumerate(zip(calls, replies, strict=True)):
        try:
            reply = send(target.client, call) if resent(sent) else sent
            if isinstance(reply, RedisFailure):
                raise reply
            results.append(call.parse(reply))
        except HistoryError as exc:
            results.append(exc)
        except RedisFailure as exc:
            error = histories[index // per].core.wrap(exc)
            if isinstance(error, AccessDeniedError | StoreUnavailableError):
                raise error from exc
            results.append(error)
    return results


def conversation_stats(target: Target, conversation_id: str) -> ConversationStats:
    """The state of one conversation: :class:`ConversationStats`.

    Raises:
        ConversationNotFoundError: the conversation has no data.
        CorruptHistoryError: its meta hash or list was lost, or holds what the store does
            not write.
        StoreUnavailableError: Redis could not be reached.
        AccessDeniedError: Redis refused the credentials or a key.
    """
    history = target.existing(conversation_id)
    facts = history.compaction_facts()
    tokens, state = facts.estimate, facts.state
    compactions, freed = history.compaction_stats()
    keys = history.keys
    try:
        with target.client.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.meta, "baseline", "abytes", "adropped", "version", "queued")
            pipe.llen(keys.archive)
            pipe.pttl(keys.meta)
            pipe.exists(keys.lock)
            fields, archived, expires_ms, locked = pipe.execute()
    except RedisFailure as exc:
        raise history.core.wrap(exc) from exc
    baseline, abytes, adropped, version, queued = fields
    try:
        numbers = [int(v) if v is not None else None for v in (baseline, abytes, adropped, version)]
    except ValueError:
        raise CorruptHistoryError(
            f"the meta hash holds a non-integer: {fields!r}",
            conversation_id=conversation_id,
            namespace=target.namespace,
        ) from None
    return ConversationStats(
        conversation_id,
        target.namespace,
        history.len(),
        tokens,
        str(state),
        history.ttl(),
        int(archived),
        baseline=numbers[0],
        archive_bytes=numbers[1] or 0,
        archive_dropped=numbers[2] or 0,
        version=numbers[3] or 0,
        compactions=compactions,
        tokens_freed=freed,
        last_compaction=_last_compaction(history),
        stored_tokens=facts.stored,
        gave_up=_gave_up(facts),
        compaction_pending=queued is not None,
        compacting=bool(locked),
        expires_in=int(expires_ms) / 1000 if int(expires_ms) >= 0 else None,
    )


def _gave_up(facts: CompactionFacts) -> dict[str, Any] | None:
    """Why and when compaction gave up on an ``Exhausted`` conversation."""
    if not facts.state.is_exhausted():
        return None
    return {"reason": GAVE_UP.get(facts.gave_up, "unknown"), "at": facts.gave_up_at}


def _last_compaction(history: RedisHistory) -> dict[str, Any] | None:
    """What the newest compaction wrote: its messages lead the live list, each marked as a
    summary, the last of them the newest."""
    newest: Entry | None = None
    start = 0
    while True:
        leading = _leading(run_call(history, history.core.entries(start, start + HEAD_PAGE - 1)))
        if leading:
            newest = leading[-1]
        if len(leading) < HEAD_PAGE:
            break
        start += HEAD_PAGE
    if newest is None:
        return None
    message = newest.message
    covers = message.metadata.get("covers")
    replaced = message.metadata.get("tokens_replaced")
    return {
        "at": _iso(message.created_at),
        "message_id": message.id,
        "covers": len(covers) if isinstance(covers, list) else None,
        "tokens_replaced": replaced if isinstance(replaced, int) else None,
    }


def _leading(page: list[Entry]) -> list[Entry]:
    """The summaries a page starts with."""
    leading = []
    for entry in page:
        if not entry.summary:
            break
        leading.append(entry)
    return leading


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")
