"""The histories users hold: :class:`RedisHistory` (sync) and :class:`AsyncRedisHistory`.

Both are thin: every method asks the shared :class:`~redis_history.store.core.HistoryCore`
for a :class:`~redis_history.wire.call.Call` and executes it in one round trip. Keys,
script arguments and reply decoding live in the core, written once; what does I/O is here
and in ``wire/lane.py``: sending, the clock, random tokens and ids, logging.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, Self, TypeVar, Unpack, cast

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from redis_history.compaction_policy import CompactionFacts, CompactionPolicy
from redis_history.compaction_state import CompactionState, Event
from redis_history.errors import HistoryError
from redis_history.limits import MAX_PAGE
from redis_history.models import Message
from redis_history.parts import BlobsWanted
from redis_history.redact import client_secrets
from redis_history.store import metrics
from redis_history.store._fork import fork_steps
from redis_history.store._pages import PagesWanted
from redis_history.store.codec import Entry
from redis_history.store.core import (
    CompactionStats,
    HistoryCore,
    Schedule,
    Scheduled,
    Step,
    TranscriptPage,
    TranscriptPages,
)
from redis_history.store.keys import DEFAULT_NAMESPACE, ConversationKeys
from redis_history.store.options import HistoryOptions, OptionFields
from redis_history.tokens import TokenCounter
from redis_history.turns import Turn
from redis_history.wire import MOVED_ON, RedisFailure, bytes_client
from redis_history.wire.call import Call
from redis_history.wire.lane import (
    WAIT_ATTEMPTS,
    again,
    anode_pipeline,
    arefresh_layout,
    asend,
    command_of,
    refresh_layout,
    send,
)
from redis_history.wire.plans import Plan, adrive, drive
from redis_history.wire.twins import AsyncRunner, On, Runner, Work, twin

__all__ = ["AsyncRedisHistory", "RedisHistory"]

T = TypeVar("T")


def _error(reply: Any) -> bool:
    """Whether a pipelined reply is an error reply (``raise_on_error=False``)."""
    return isinstance(reply, ResponseError)


logger = logging.getLogger("redis_history")


def _now_ms() -> int:
    """The clock the core is handed: milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def _appending(core: HistoryCore, messages: Sequence[Message]) -> Plan[Call[bool | None], None]:
    """An append of ``messages``, counted in the store's metrics (refused, or appended and
    replayed)."""
    started = metrics.clock()
    try:
        replayed = yield core.append(messages)
    except HistoryError as exc:
        metrics.refused(exc)
        raise
    metrics.appended(len(messages), metrics.clock() - started, replayed)


def _written(kind: str, make: Callable[[], Call[T]]) -> Plan[Call[T], T]:
    """A rewrite, built and sent, timed in the store's metrics."""
    started = metrics.clock()
    result: T = yield make()
    metrics.written(kind, metrics.clock() - started)
    return result


def _read(make: Callable[[], Call[T]]) -> Plan[Call[T], T]:
    """A snapshot read, built, sent and parsed, timed in the store's metrics."""
    started = metrics.clock()
    result: T = yield make()
    metrics.snapshot_read(metrics.clock() - started)
    return result


def _counted(plan: Plan[Step, bool]) -> Plan[Step, bool]:
    """``maybe_compact``'s plan, counted in the store's metrics when it enqueues."""
    enqueued = yield from plan
    if enqueued:
        metrics.compaction_enqueued()
    return enqueued


class _Base:
    """What both front ends share: the client, the core, and their options."""

    def __init__(
        self,
        client: Any,
        conversation_id: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        options: HistoryOptions | None = None,
        **fields: Unpack[OptionFields],
    ) -> None:
        """Bind a conversation to a Redis client.

        Args:
            client: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` (asyncio
                variants for :class:`AsyncRedisHistory`).
            conversation_id: the conversation; no braces or control characters.
            namespace: the tenant; first in every key so ACL patterns can confine it.
            options: how the conversation is stored (:class:`HistoryOptions`); the
                defaults otherwise.
            fields: any of :class:`HistoryOptions`'s fields, over ``options``
                (``prefix``, ``token_counter``, ``validate``, ``roles``,
                ``max_message_bytes``, ``ttl``, ``wait_replicas``, ``wait_timeout``).

        Raises:
            UnsupportedClientError: a client made with ``decode_responses=True``.
            ValueError: an unusable conversation id, namespace, prefix or option.
        """
        self.client = bytes_client(client)
        self.core = HistoryCore(
            conversation_id,
            namespace=namespace,
            options=(options or HistoryOptions()).merged(fields),
            secrets=client_secrets(client),
            clock=_now_ms,
            entropy=os.urandom,
        )
        self.conversation_id = conversation_id
        """The conversation this history reads and writes."""
        self.namespace = namespace
        """The tenant the conversation belongs to."""
        self.keys: ConversationKeys = self.core.keys
        """The conversation's Redis keys."""
        self.token_counter: TokenCounter = self.core.counter
        """The counter that prices each message at write time."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.namespace!r}/{self.conversation_id!r})"

    def _sibling(self, conversation_id: str, namespace: str | None) -> Self:
        """A history of another conversation on the same client, with the same options (in
        this history's namespace unless ``namespace`` is given)."""
        namespace = self.namespace if namespace is None else namespace
        return type(self)(self.client, conversation_id, namespace=namespace, options=self.options)

    @property
    def options(self) -> HistoryOptions:
        """How the conversation is stored."""
        return self.core.options


class _History(_Base):
    """Every operation of both histories, written once (:mod:`redis_history.wire.twins`)."""

    @twin
    def append(self, message: Message) -> Work[None]:
        """Add one message at the tail, checked against the stored role and tool state.

        Safe to retry: a message whose id was appended by one of the conversation's
        last ``OPS_KEPT`` appends is not appended again, unless a :meth:`rollback` or
        :meth:`truncate` has removed it since (the retry of a failed turn appends it).

        Raises:
            RoleOrderError: the role may not follow the last one.
            ToolPairingError: a tool result answers no open call, or calls are unanswered.
            MessageTooLargeError: the message is over ``max_message_bytes``.
            StaleSnapshotError: the same batch was appended before and a rollback or a
                truncate removed part of it since; nothing was written.
            StoreUnavailableError: Redis could not be reached; the message may or may not
                be stored, and repeating the same call is safe.
        """
        return _appending(self.core, [message])

    @twin
    def append_many(self, messages: Sequence[Message]) -> Work[None]:
        """Add a whole turn, checked as a batch: all of it is written or none of it.

        Safe to retry with the same messages, like :meth:`append`; after a
        :meth:`rollback` or :meth:`truncate` that removed all of them, they are appended
        again, and after one that removed part of them, ``StaleSnapshotError``.
        """
        return _appending(self.core, messages)

    @twin
    def replace(
        self,
        messages: Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        op_id: str | None = None,
    ) -> Work[None]:
        """Replace every message (checked from an empty start); resets the token baseline.

        Args:
            messages: the new history.
            expected_ids: the ids the conversation must hold now, in order (those of the
                snapshot the caller edited); anything else refuses.
            op_id: names this operation, so that repeating the call with the same
                ``op_id`` is applied once (redis-py's own retries are covered without it).

        Raises:
            StaleSnapshotError: the conversation no longer holds ``expected_ids``.
        """
        return _written(
            "replace", lambda: self.core.replace(messages, expected_ids=expected_ids, op_id=op_id)
        )

    @twin
    def splice_prefix(
        self,
        drop_count: int,
        summary: Message | Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        lock_token: str | None = None,
        archive_max_messages: int | None = None,
        archive_max_bytes: int | None = None,
        op_id: str | None = None,
    ) -> Work[int]:
        """Replace the first ``drop_count`` messages with ``summary``, keeping the rest.

        The originals move to the archive. Messages appended after the caller's
        snapshot are kept. Resets the token baseline. Repeating the call with the
        same summary message is applied once.

        Args:
            drop_count: how many of the oldest messages to replace; clamped to the length.
            summary: the message (or messages) to put in their place: summaries, or
                kept messages (a compactor's), each marked as written by a splice
                (``Entry.summary``), so the transcript shows the archived originals.
                They are not checked here; a compaction checks them against the tail.
            expected_ids: the ids of the prefix that was summarized; a mismatch refuses.
            lock_token: the compaction lock token; if another holds the lock, refuses.
            archive_max_messages: drop the oldest archived entries beyond this many.
            archive_max_bytes: drop the oldest archived entries beyond this many bytes.
            op_id: names this operation (the summary's ids do otherwise).

        Returns:
            The number of messages dropped (0 on an empty history: nothing is written).

        Raises:
            StaleSnapshotError: the prefix is no longer ``expected_ids``.
            LockLostError: ``lock_token`` does not hold the conversation's lock.
        """
        return self.core.splice_prefix(
            drop_count,
            summary,
            expected_ids=expected_ids,
            lock_token=lock_token,
            archive_max_messages=archive_max_messages,
            archive_max_bytes=archive_max_bytes,
            op_id=op_id,
        )

    @twin
    def fork(
        self, new_conversation_id: str, *, at: str, namespace: str | None = None
    ) -> Work[Self]:
        """Copy the conversation up to and including message ``at`` into a new conversation.

        The copy is a prefix of one version of this conversation, whatever other pods
        append or rewrite meanwhile, and appears whole at once; it is read and written in
        calls no larger than one write of the store. It holds the live messages (ids,
        contents, token counts, summary flags) and the archive, so its transcript is this
        one's record up to ``at``; its turn state is the prefix's (its next append is
        checked against it), its token estimate counts the prefix (with the baseline the
        model last reported, if that was before ``at``), it has this conversation's TTL,
        and a fresh compaction state. Shared summaries, claims and locks stay here.
        redis-py's resend of a write whose reply was lost is applied once; a repeat of the
        call after a ``StoreUnavailableError`` may find the new conversation made
        (``ConversationExistsError``).

        Args:
            new_conversation_id: the new conversation; the same rules as the constructor's.
            at: the id of the live message the copy ends with.
            namespace: the new conversation's namespace; this history's when ``None``.

        Returns:
            A history of the new conversation: the same class, client and options as this.

        Raises:
            ConversationExistsError: the new conversation exists.
            MessageNotFoundError: ``at`` is not a live message of this conversation.
            ToolPairingError: the copy would end with tool calls unanswered (``at`` is a
                call, or a result while others of its calls are unanswered), when
                validating.
            ValueError: an unusable conversation id, namespace or message id.
            HistoryError: rewrites changed this conversation during each of
                ``READ_ATTEMPTS`` reads. Nothing is written when any of these is raised.
        """
        return self._fork(self._sibling(new_conversation_id, namespace), at)

    def _fork(self, target: Self, at: str) -> Plan[Any, Self]:
        yield from fork_steps(self.core, target.core, at, target)
        return target

    @twin
    def truncate(self, n: int, *, op_id: str | None = None) -> Work[int]:
        """Keep at most ``n`` messages; returns how many were removed.

        Positional, so for a single writer: with several pods, roll back a failed
        turn with :meth:`rollback`, which names the messages instead. What it removes
        may be appended again, as after a rollback.
        """
        return self.core.truncate(n, op_id=op_id)

    @twin
    def rollback(
        self,
        messages: Sequence[str | Message],
        *,
        op_id: str | None = None,
        reopen_calls: bool = False,
    ) -> Work[int]:
        """Remove exactly these messages (a failed turn), wherever compaction has moved them.

        Everything else stays, in order. Each call is a new operation unless ``op_id``
        names it: redis-py's resend after a lost reply is applied once and answers with
        the count, but a second rollback of messages already removed, by this caller or
        another, raises ``StaleSnapshotError``, so the count means "I removed them".
        A batch whose messages it removes, all of them, may be appended again (the retry
        of the turn); appending one it removed part of raises ``StaleSnapshotError``.

        Args:
            messages: the messages, or their ids, to remove (at most ``MAX_ROLLBACK``,
                among the last ``MAX_ROLLBACK`` messages).
            op_id: names this operation: repeated with it (after a
                ``StoreUnavailableError``), it is applied once and answers as the first did.
            reopen_calls: let the removal of the latest tool results leave their calls
                open at the tail, awaiting results again (an undo of the last tool output);
                by default a call is never parted from a result it had.

        Returns:
            How many messages were removed.

        Raises:
            StaleSnapshotError: one of them is no longer in the conversation (compacted,
                removed by an earlier rollback, or never stored), or removing them would
                break role order or tool pairing for what remains; nothing was removed.
            LimitExceededError: one of them is further back than a rollback reaches.
        """
        return _written(
            "rollback",
            lambda: self.core.rollback(messages, op_id=op_id, reopen_calls=reopen_calls),
        )

    @twin
    def record_input_tokens(self, n: int, *, op_id: str | None = None) -> Work[None]:
        """Make the LLM's reported input-token count the baseline for ``token_estimate``.

        A conversation that does not exist yet is left alone.
        """
        return self.core.record_input_tokens(n, op_id=op_id)

    @twin
    def set_ttl(self, ttl: float | timedelta | None) -> Work[bool]:
        """Give the conversation a TTL that every writer applies, or take it away (``None``).

        Returns:
            Whether the conversation exists (nothing is set on one that does not).
        """
        return self.core.set_ttl(ttl)

    @twin
    def ttl(self) -> Work[float | None]:
        """The conversation's TTL in seconds, as stored with it; ``None`` for none."""
        return self.core.ttl()

    @twin
    def token_estimate(self) -> Work[int | None]:
        """Baseline plus tokens since, else the stored total; ``None`` when empty. O(1)."""
        return self.core.token_estimate()

    @twin
    def snapshot(self) -> Work[list[Message]]:
        """Every live message, in order."""
        return _read(self.core.messages)

    @twin
    def snapshot_openai(self) -> Work[list[dict[str, Any]]]:
        """Every live message as a chat-completions request message, ready to send.

        Equal to ``[m.to_openai() for m in self.snapshot()]``, and validated as
        :meth:`snapshot` validates, but rendered from the stored JSON without building a
        ``Message`` per message: the cheaper read when the messages only go to the LLM.

        Raises:
            CorruptHistoryError: a stored envelope is not a valid message.
        """
        return _read(self.core.openai_messages)

    @twin
    def entries(self) -> Work[list[Entry]]:
        """Every live message with its stored token count and summary flag."""
        return self.core.entries()

    @twin
    def turns(self, *, allow_open: bool = True) -> Work[list[Turn]]:
        """Every live message grouped into turns, tool calls paired with their results.

        See :func:`redis_history.group_turns`, with ``roles="lenient"``: whichever role
        rules the pods that wrote the conversation had, it reads (as the strict rules
        group it, when they take it). The summaries ``splice_prefix`` left at the head
        lead the first turn, whatever their role.

        Args:
            allow_open: read a conversation mid-turn, as the store allows it: the last
                step may hold calls whose results are not appended yet
                (``turn.complete`` is false). ``False`` refuses that instead.

        Raises:
            ToolPairingError: a call or result without its partner (in a history
                written with ``validate=False``, or spliced inside a turn).
            RoleOrderError: roles the store's rules refuse, likewise.
        """
        return self.core.turns(allow_open=allow_open)

    @twin
    def tail(self, n: int) -> Work[list[Message]]:
        """The last ``n`` messages."""
        return self.core.tail(n)

    @twin
    def range(self, start: int = 0, stop: int | None = None) -> Work[list[Message]]:
        """Messages ``[start:stop]``, with Python slice bounds."""
        return self.core.range(start, stop)

    @twin
    def transcript(self) -> Work[list[Message]]:
        """The full record: archived originals, then live messages, without summaries.

        Read a page at a time (:meth:`iter_transcript`), so that no read holds Redis for
        long, whatever the record's size."""
        pages = TranscriptPages()
        messages: list[Message] = []
        start: int | None = 0
        while start is not None:
            page = yield self.core.transcript_page(start, MAX_PAGE)
            messages.extend(pages.fresh(page))
            start = page.next
        return messages

    @twin
    def transcript_page(self, start: int = 0, count: int = 500) -> Work[TranscriptPage]:
        """Up to ``count`` entries of the full record from position ``start``; fewer once
        what they read back (texts stored compressed counted decompressed) reaches
        ``MAX_READ_BYTES``, and ``page.next`` is then where the page ended.

        Positions are stable while compaction moves messages to the archive, so
        paging with ``page.next`` neither skips nor repeats a message, except that
        each summary written meanwhile shifts the live part by one (which
        :meth:`iter_transcript` takes care of).
        """
        return self.core.transcript_page(start, count)

    @twin
    def compaction_state(self) -> Work[CompactionState]:
        """The conversation's compaction state (``Ready`` when never set)."""
        return self.core.compaction_state()

    @twin
    def advance_turn(self, *, op_id: str | None = None) -> Work[CompactionState]:
        """Move the compaction state to the next turn; call once at the start of a user turn."""
        return self.core.compaction_event("advance_turn", op_id=op_id)

    @twin
    def compaction_status(self) -> Work[tuple[int | None, CompactionState]]:
        """:meth:`token_estimate` and :meth:`compaction_state` read together, in one round trip.

        Raises:
            CorruptHistoryError: the stored state or counters are not ones redis-history writes.
        """
        return self.core.compaction_status()

    @twin
    def compaction_facts(self) -> Work[CompactionFacts]:
        """What decides whether compaction is due (``CompactionPolicy.due``): the estimate, the
        stored messages' token total, the state, the live length, and when and why
        compaction last gave up, read in one round trip."""
        return self.core.compaction_facts()

    @twin
    def compaction_stats(self) -> Work[CompactionStats]:
        """How many compactions this conversation has had, and the tokens they freed."""
        return self.core.compaction_stats()

    @twin
    def compaction_event(
        self, event: Event, value: int = 0, freed: int = 0, *, op_id: str | None = None
    ) -> Work[CompactionState]:
        """Apply a compaction-state event atomically (``compacted`` counts ``freed`` tokens).

        Raises:
            InvalidTransitionError: the stored state does not allow ``event``; nothing changed.
        """
        return self.core.compaction_event(event, value, freed, op_id=op_id)

    @twin
    def maybe_compact(
        self, schedule: Schedule, policy: CompactionPolicy | None = None
    ) -> Work[bool]:
        """Schedule a background compaction if one is due and none is pending.

        Looks only at :meth:`token_estimate` and :meth:`compaction_state`; however
        many pods call this at once, at most one compaction is scheduled per
        conversation. When compaction is exhausted, one call (of all pods') logs a
        warning on the ``redis_history`` logger.

        Args:
            schedule: runs the compaction in the background, given a
                :class:`~redis_history.store.core.CompactionRequest`: the RQ queue that
                :func:`redis_history.compaction.jobs.compaction_queue` returns, or any callable.
            policy: thresholds and budgets; the defaults otherwise.

        Returns:
            Whether this call scheduled a compaction.

        Raises:
            StoreUnavailableError: the store, or the queue's Redis, could not be reached;
                a claim taken is released.
        """

        return _counted(self.core.maybe_compact(policy or CompactionPolicy(), schedule))

    @twin
    def release_compaction_claim(self, job_id: str) -> Work[bool]:
        """Drop the pending-compaction claim so the next :meth:`maybe_compact` may enqueue.

        Only ``job_id``'s own claim is dropped; a newer job's claim stays.

        Args:
            job_id: the RQ job id the claim was taken for.

        Returns:
            Whether the claim was ``job_id``'s and is now released.
        """
        return self.core.release_claim(job_id)

    @twin
    def len(self) -> Work[int]:
        """Number of live messages."""
        return self.core.length()

    @twin
    def is_empty(self) -> Work[bool]:
        """Whether the history has no messages."""
        return (yield self.core.length()) == 0

    @twin
    def delete(self) -> Work[bool]:
        """Remove the conversation (messages, archive, meta, lock); whether it existed."""
        return self.core.delete()


class RedisHistory(_History, Runner):
    """One conversation's history in Redis, shared safely by any number of processes.

    Every method is one atomic Redis operation. Writes raise
    :class:`~redis_history.errors.InvalidMessageError` subclasses for bad input
    (and write nothing), and every method raises
    :class:`~redis_history.errors.StoreUnavailableError` when Redis is unreachable.
    """

    client: redis.Redis | Any

    @classmethod
    def from_url(cls, url: str, conversation_id: str, **options: Any) -> Self:
        """A history on a new client for ``url`` (``redis://``, ``rediss://``, ``unix://``)."""
        return cls(redis.Redis.from_url(url), conversation_id, **options)

    def run(self, work: Work[T]) -> T:
        """Do an operation's work: send its call, or drive its plan (interrupts too are
        handed to a plan, which undoes what it staged or claimed)."""
        if isinstance(work, Call):
            return self.execute(cast(Call[T], work))
        return drive(work, self._step, handed=BaseException)

    def _step(self, step: Any) -> Any:
        if isinstance(step, Call):
            return self.execute(step)
        if isinstance(step, On):
            return step.front.execute(step.call)
        if isinstance(step, Scheduled):
            try:
                return step.schedule(step.request)
            except RedisFailure as exc:
                raise self.core.wrap(exc) from exc
        logger.warning(step)
        return None

    def iter_transcript(self, page_size: int = 500) -> Iterator[Message]:
        """The full record, read ``page_size`` entries per round trip."""
        return TranscriptPages().every(lambda start: self.transcript_page(start, page_size))

    def __len__(self) -> int:
        return self.len()

    def execute(self, call: Call[T]) -> T:
        """Send ``call``, built by one of the store's sans-IO cores (this history's, or the
        shared summaries' the context layer keeps in the conversation's keys), with this
        history's ``WAIT`` and error wrapping, and parse its reply."""
        if not call.command:  # nothing to send (an empty append)
            return call.parse(None)
        if call.waits and self.core.wait is not None:
            return self._run_waiting(call)
        try:
            reply = send(self.client, call)
        except RedisFailure as exc:
            raise self.core.wrap(exc) from exc
        try:
            return call.parse(reply)
        except (BlobsWanted, PagesWanted) as wanted:  # data kept outside the list, pages
            return drive(self.core.wanted(call, reply, wanted), self.execute)

    def _run_waiting(self, call: Call[T]) -> T:
        """Run a write and ``WAIT`` for its replicas on the same connection."""
        try:
            command: tuple[Any, ...] | None = command_of(self.client, call)
            while command is not None:
                reply, acknowledged = self._pipe_with_wait(command)
                command = again(self.client, call, command, reply) if _error(reply) else None
        except RedisFailure as exc:
            raise self.core.wrap(exc) from exc
        return self.core.settle(call, reply, acknowledged)

    def _pipe_with_wait(self, command: tuple[Any, ...]) -> tuple[Any, Any]:
        """``command`` then ``WAIT`` in one pipeline; on a cluster, on the slot's primary."""
        assert self.core.wait is not None
        if not isinstance(self.client, RedisCluster):
            with self.client.pipeline(transaction=False) as pipe:
                pipe.execute_command(*command)
                pipe.execute_command(*self.core.wait)
                reply, acknowledged = pipe.execute(raise_on_error=False)
            return reply, acknowledged
        cluster: Any = self.client  # redis-py's cluster methods are untyped
        for attempt in range(WAIT_ATTEMPTS):
            # The cluster client sends WAIT to every primary; a node's own pipeline keeps it
            # on the connection that made the write.
            try:
                node = cluster.get_node_from_key(self.keys.msgs)
                with cluster.get_redis_connection(node).pipeline(transaction=False) as pipe:
                    pipe.execute_command(*command)
                    pipe.execute_command(*self.core.wait)
                    reply, acknowledged = pipe.execute(raise_on_error=False)
                if not isinstance(reply, MOVED_ON):
                    return reply, acknowledged
            except MOVED_ON:
                if attempt == WAIT_ATTEMPTS - 1:
                    raise
            time.sleep(0.1 * 2**attempt)  # a failover or a slot migration: read the layout again
            refresh_layout(cluster)
        return reply, acknowledged


class AsyncRedisHistory(_History, AsyncRunner):
    """:class:`RedisHistory` for ``redis.asyncio``: the same methods, as coroutines."""

    client: redis.asyncio.Redis | Any

    @classmethod
    def from_url(cls, url: str, conversation_id: str, **options: Any) -> Self:
        """A history on a new asyncio client for ``url``."""
        return cls(redis.asyncio.Redis.from_url(url), conversation_id, **options)

    async def execute(self, call: Call[T]) -> T:
        """:meth:`RedisHistory.execute`, awaited."""
        if not call.command:  # nothing to send (an empty append)
            return call.parse(None)
        if call.waits and self.core.wait is not None:
            return await self._run_waiting(call)
        try:
            reply = await asend(self.client, call)
        except RedisFailure as exc:
            raise self.core.wrap(exc) from exc
        try:
            return call.parse(reply)
        except (BlobsWanted, PagesWanted) as wanted:  # data kept outside the list, pages
            return await adrive(self.core.wanted(call, reply, wanted), self.execute)

    async def _run_waiting(self, call: Call[T]) -> T:
        """See :meth:`RedisHistory._run_waiting`."""
        try:
            command: tuple[Any, ...] | None = command_of(self.client, call)
            while command is not None:
                reply, acknowledged = await self._pipe_with_wait(command)
                command = again(self.client, call, command, reply) if _error(reply) else None
        except RedisFailure as exc:
            raise self.core.wrap(exc) from exc
        return self.core.settle(call, reply, acknowledged)

    async def _pipe_with_wait(self, command: tuple[Any, ...]) -> tuple[Any, Any]:
        """See :meth:`RedisHistory._pipe_with_wait`."""
        assert self.core.wait is not None
        if not isinstance(self.client, AsyncRedisCluster):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.execute_command(*command)
                pipe.execute_command(*self.core.wait)
                reply, acknowledged = await pipe.execute(raise_on_error=False)
            return reply, acknowledged
        for attempt in range(WAIT_ATTEMPTS):
            # The cluster client sends WAIT to every primary; a node's own pipeline keeps it
            # on the connection that made the write.
            try:
                node = self.client.get_node_from_key(self.keys.msgs)
                reply, acknowledged = await anode_pipeline(node, (command, self.core.wait))
                if not isinstance(reply, MOVED_ON):
                    return reply, acknowledged
            except MOVED_ON:
                if attempt == WAIT_ATTEMPTS - 1:
                    raise
            await asyncio.sleep(0.1 * 2**attempt)
            await arefresh_layout(self.client)
        return reply, acknowledged

    async def run(self, work: Work[T]) -> T:
        """:meth:`RedisHistory.run`, awaited."""
        if isinstance(work, Call):
            return await self.execute(work)
        return await adrive(work, self._step, handed=BaseException)

    async def _step(self, step: Any) -> Any:
        """See :meth:`RedisHistory._step`; a blocking ``schedule`` runs in a thread, and one
        that returns an awaitable is awaited."""
        if isinstance(step, Call):
            return await self.execute(step)
        if isinstance(step, On):
            return await step.front.execute(step.call)
        if isinstance(step, Scheduled):
            try:
                scheduled = await asyncio.to_thread(step.schedule, step.request)
                return await scheduled if inspect.isawaitable(scheduled) else scheduled
            except RedisFailure as exc:
                raise self.core.wrap(exc) from exc
        logger.warning(step)
        return None

    async def iter_transcript(self, page_size: int = 500) -> AsyncIterator[Message]:
        """See :meth:`RedisHistory.iter_transcript`."""
        pages = TranscriptPages()
        start: int | None = 0
        while start is not None:
            page = await self.transcript_page(start, page_size)
            for message in pages.fresh(page):
                yield message
            start = page.next
