"""HistoryManager: what goes into each model call, and what is kept of what was left out.

Before a model call, :meth:`HistoryManager.prepare_messages` builds the request: one system
message (the prompt, then memories recalled from long-term memory within
``memory_token_budget``, then summaries), then as much of the history as the strategy keeps
and the budget allows, then the current turn, rendered in the wire format asked for. Turns go
whole (:mod:`redis_history.turns`), so a tool call is never separated from its result, and the
current turn is never dropped: when the system message, the current turn and the reserve alone
do not fit, it raises :class:`~redis_history.errors.BudgetExceededError` with each part's tokens.

The strategies (``HistoryManagerConfig.strategy``):

- ``sliding_window``: the last ``window_turns`` whole turns (the current one included), fewer
  if the budget says so.
- ``token_budget``: as many recent whole turns as fit.
- ``summary_and_tail``: as many recent whole turns as fit, as ``token_budget`` does (the name
  seed 003 gives the loop that summarizes what it leaves out).

Whatever the strategy, the system message is built first and holds the summaries: the ones
compaction stored at the head of the history (system messages whose ``metadata["summary"]``
is true; the prompt they repeat is left out of them), then the manager's own
(:meth:`~HistoryManager.with_summaries`, and what :meth:`~HistoryManager.on_turn_complete`
summarized). The history's system prompt is kept too, unless the same text is given as
``system_message``.

After the turn, :meth:`HistoryManager.on_turn_complete` summarizes what the request left out
(``PreparedRequest.dropped``), once per message, keeps the summary for the next requests,
and stores it in long-term memory, when those are enabled. Given a queue
(:meth:`~HistoryManager.with_extraction`), it first enqueues the extraction of the
conversation's new messages into the owner's memories, which the compaction workers run: the
turn waits for the enqueue only, never for the extractor.

Where the summaries are kept: in the process, or, given ``history=`` (a
:class:`~redis_history.RedisHistory` or an :class:`~redis_history.AsyncRedisHistory`), in
that conversation's ``summaries`` hash in Redis, so every pod's next ``prepare_messages``
sends what any pod summarized. There each summary records the run of messages it covers
(its first id, its length and a digest of its ids); the pods that complete one turn at once
claim its evicted messages in one script (``lua/claim_summary-2.lua``), so one of them
summarizes them and the others go on without waiting (the summary is in their next
request); a pod whose claim expired and was taken over stores nothing. A summary whose run
is no longer whole in the history (compaction replaced some of it by its own summary) is
not sent, and the next ``on_turn_complete`` drops it and summarizes its live messages anew.

``prepare_messages`` takes messages already read (``history.snapshot()``); its calls out are
the long-term memory's recall and, with ``history=``, one script call that reads the shared
summaries. An asyncio pod calls :meth:`~HistoryManager.aprepare_messages`,
:meth:`~HistoryManager.aon_turn_complete` and :meth:`~HistoryManager.asummaries`, given an
:class:`~redis_history.AsyncRedisHistory` and an
:class:`~redis_history.memory.AsyncRedisLongTermMemory`: each method is one plan
(:mod:`redis_history.wire.plans`) that yields its calls out, which the sync methods do in place
and the coroutines await (a summarizer in a worker thread), so the rules are written once.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field

from redis_history import limits
from redis_history.compaction.summarizers import AsyncSummarizer, Summarizer, resolve_summarizer
from redis_history.context.budget import (
    Framing,
    budget_error,
    framing_of,
    keep_newest,
    split_turns,
)
from redis_history.context.formats import WireFormat, render
from redis_history.deprecation import moved
from redis_history.memory.base import (
    AsyncLongTermMemory,
    LongTermMemory,
    MemoryFilters,
    MemoryRecord,
    resolve_memory,
)
from redis_history.memory.redis_memory import RedisLongTermMemory
from redis_history.models import Message
from redis_history.store.history import AsyncRedisHistory, RedisHistory
from redis_history.store.summaries import StoredSummary, SummaryCore
from redis_history.tokens import TokenCounter, price, resolve_counter
from redis_history.wire import RedisFailure
from redis_history.wire.call import Call
from redis_history.wire.plans import Plan, adrive, drive
from redis_history.wire.twins import AsyncRunner, Runner, Work, twin

__all__ = [
    "Diagnostics",
    "ExtractionQueue",
    "HistoryManager",
    "HistoryManagerConfig",
    "PreparedRequest",
    "Strategy",
]

Strategy = Literal["sliding_window", "token_budget", "summary_and_tail"]
"""How a :class:`HistoryManager` chooses the history it sends; see the module docstring."""

MEMORY_HEADER = "Relevant long-term memories:"
"""The line that introduces recalled memories in the system message."""


class ExtractionQueue(Protocol):
    """What :meth:`HistoryManager.with_extraction` takes: a queue that enqueues the
    extraction of a conversation's new messages into an owner's memories and returns without
    running it, such as :class:`~redis_history.compaction.jobs.CompactionQueue`
    (``compaction_queue()``). Its ``extract`` blocks (an RQ enqueue on a sync client), so
    :class:`AsyncHistoryManager` calls it in a worker thread."""

    def extract(self, history: RedisHistory, agent_id: str, user_id: str | None = None) -> object:
        """Enqueue the extraction of ``history``'s unread messages into the memories of
        (``agent_id``, ``user_id``). ``history`` is the manager's own (an
        ``AsyncRedisHistory`` for an :class:`AsyncHistoryManager`): the job needs only its
        names (``namespace``, ``conversation_id``, ``options.prefix``)."""
        ...


class HistoryManagerConfig(BaseModel):
    """How a :class:`HistoryManager` builds requests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Strategy = "token_budget"
    """``sliding_window``, ``token_budget`` or ``summary_and_tail``."""
    window_turns: int = Field(default=10, ge=1)
    """``sliding_window``: the most turns sent, the current one included."""
    enable_summarization: bool = False
    """Summarize what a request left out in :meth:`HistoryManager.on_turn_complete`."""
    enable_long_term_memory: bool = False
    """Recall memories into the system message, and store summaries as memories."""
    recall_top_k: int = Field(default=5, ge=0)
    """The most memories recalled for one request."""
    memory_token_budget: int = Field(default=500, ge=0)
    """The most tokens recalled memories take in the system message; those beyond are left
    out, the nearest kept first."""
    reserve_tokens: int = Field(default=0, ge=0)
    """Tokens of the budget kept free for the reply."""
    max_summaries: int = Field(default=32, ge=1, le=limits.MAX_SUMMARIES)
    """With ``history=``: the most summaries kept for the conversation; past it the oldest
    is dropped (its messages are not summarized again)."""
    summary_claim_seconds: float = Field(default=120.0, gt=0, le=3600)
    """With ``history=``: how long a pod's claim on the messages it summarizes holds; a pod
    that crashed meanwhile leaves them to be claimed again after it."""
    token_counter: str = "o200k_base"
    """The counter that prices requests (:func:`~redis_history.tokens.resolve_counter`):
    ``"o200k_base"`` (exact, counts remembered by text), ``"estimate"`` (fast, never exact)…"""


@dataclass(frozen=True, slots=True)
class Diagnostics:
    """What a request holds and what it left out; the tokens of its parts add up to ``total``."""

    budget: int
    """The budget asked for."""
    reserve: int
    """Tokens kept free for the reply: ``total + reserve <= budget``."""
    system: int
    """The system message's prompt and framing, and the tokens that prime the reply."""
    memories: int
    """The recalled memories in the system message (their header included)."""
    summaries: int
    """The summaries in the system message."""
    history: int
    """The kept turns before the current one."""
    current_turn: int
    """The current turn."""
    total: int
    """The whole request."""
    dropped: tuple[Message, ...]
    """The messages of the turns left out, oldest first (what ``on_turn_complete`` takes)."""
    dropped_turns: int
    """How many whole turns were left out."""
    kept_turns: int
    """How many turns before the current one were kept."""
    memories_recalled: int
    """Memories the long-term memory returned."""
    memories_kept: int
    """Of those, the ones within ``memory_token_budget``."""


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """What :meth:`HistoryManager.prepare_messages` returns."""

    request: dict[str, Any]
    """The model call's keyword arguments in the chosen format (``render``'s)."""
    messages: list[Message]
    """The same request as messages: the system message, if any, then the history kept."""
    diagnostics: Diagnostics
    """Tokens per part, what was dropped."""

    @property
    def dropped(self) -> list[Message]:
        """The messages left out, oldest first."""
        return list(self.diagnostics.dropped)


def _is_summary(message: Message) -> bool:
    return message.metadata.get("summary") is True


def _summary_text(message: Message) -> str:
    """A stored summary's text without the system prompt compaction repeats at its head."""
    text = message.content
    prompt = message.metadata.get("system_prompt")
    if isinstance(prompt, str) and prompt and text.startswith(prompt):
        text = text[len(prompt) :]
    return text.strip()


def _is_coroutine(plugin: object, method: str) -> bool:
    return inspect.iscoroutinefunction(getattr(plugin, method, None))


def _is_async(memory: object) -> bool:
    """Whether ``memory`` is an :class:`AsyncLongTermMemory` (a coroutine ``recall`` or
    ``store``), which only the manager's coroutines can use."""
    return _is_coroutine(memory, "recall") or _is_coroutine(memory, "store")


def _join(blocks: Sequence[str]) -> str:
    return "\n\n".join(block for block in blocks if block)


class _Recall(NamedTuple):
    """A step: recall from the long-term memory."""

    query: str
    filters: MemoryFilters
    top_k: int


class _Remember(NamedTuple):
    """A step: store a text in the long-term memory."""

    text: str
    metadata: Mapping[str, Any]


class _Summarize(NamedTuple):
    """A step: the summarizer's summary of ``messages``."""

    summarizer: Summarizer | AsyncSummarizer
    messages: list[Message]


class _Extract(NamedTuple):
    """A step: enqueue the extraction of the conversation's new messages."""

    queue: ExtractionQueue
    agent_id: str
    user_id: str | None


class _Plugged(NamedTuple):
    """A step: check, before anything is done, that the plug-ins suit the front end."""


_PLUGGED = _Plugged()

_Step = Call[Any] | _Recall | _Remember | _Summarize | _Extract | _Plugged
"""What the manager's plans ask their front end to do: a call on the history's Redis, a
recall or a store in long-term memory, a summary, an extraction's enqueue, the plug-ins'
check."""

T = TypeVar("T")


class _Manager:
    """What both managers share: the configuration, the plug-ins, and every operation,
    written once as a plan of steps (:mod:`redis_history.wire.twins`)."""

    def __init__(
        self,
        config: HistoryManagerConfig | None = None,
        *,
        history: RedisHistory | AsyncRedisHistory | None = None,
    ) -> None:
        """Start with ``config`` (the defaults otherwise), no summaries and no memory.

        Args:
            config: How requests are built.
            history: The conversation whose ``summaries`` hash keeps the summaries, shared
                by every pod's manager given the same conversation; ``None`` keeps them in
                this process. A ``RedisHistory`` for :class:`HistoryManager`, an
                ``AsyncRedisHistory`` for :class:`AsyncHistoryManager`.

        Raises:
            ValueError: ``config.token_counter`` names no counter.
            TypeError: ``history`` is not a history this manager can use.
        """
        self.config = config or HistoryManagerConfig()
        self._counter: TokenCounter = resolve_counter(self.config.token_counter)
        self._summarizer: Summarizer | AsyncSummarizer | None = None
        self._memory: LongTermMemory | AsyncLongTermMemory | None = None
        self._extraction: ExtractionQueue | None = None
        self._summaries: list[str] = []
        self._summarized: set[str] = set()
        if history is not None and not isinstance(history, self._histories):
            raise TypeError(
                f"{type(self).__name__}'s history must be "
                f"{' or '.join(kind.__name__ for kind in self._histories)}, "
                f"got {type(history).__name__}"
            )
        self._history = history
        self._shared = (
            None
            if history is None
            else SummaryCore(history.keys, history.conversation_id, history.namespace)
        )
        self._stale: list[int] = []

    _histories: tuple[type, ...] = (RedisHistory, AsyncRedisHistory)

    def with_summarizer(self, summarizer: Summarizer | AsyncSummarizer | str) -> Self:
        """Summarize with ``summarizer`` (an object, an alias or a dotted path); by default
        the extractive one.

        Raises:
            ValueError, TypeError: ``summarizer`` names no summarizer.
        """
        if _is_coroutine(summarizer, "summarize"):
            self._summarizer = cast(AsyncSummarizer, summarizer)
        else:
            self._summarizer = resolve_summarizer(cast(Summarizer | str, summarizer))
        return self

    def with_memory(self, memory: LongTermMemory | AsyncLongTermMemory | str) -> Self:
        """Recall from and store into ``memory`` (when ``enable_long_term_memory``): an
        object, ``"in_memory"`` or a dotted path (:func:`~redis_history.memory.resolve_memory`).
        A memory whose ``recall`` and ``store`` are coroutines (such as
        :class:`~redis_history.memory.AsyncRedisLongTermMemory`) serves
        :class:`AsyncHistoryManager` only.

        Raises:
            ValueError, TypeError: ``memory`` names no long-term memory.
        """
        if _is_async(memory):
            self._memory = cast(AsyncLongTermMemory, memory)
        else:
            self._memory = resolve_memory(cast(LongTermMemory | str, memory))
        return self

    def with_extraction(self, queue: ExtractionQueue) -> Self:
        """After each turn, have the conversation's new messages extracted into the owner's
        long-term memories in the background: :meth:`on_turn_complete` enqueues
        ``queue.extract(history, agent_id, user_id)`` (one job per conversation and owner;
        the compaction workers, ``redis-history worker``, run it with their extractor), with
        or without summarization. The turn waits for the enqueue (one ``MULTI`` on the
        queue's Redis), never for the extractor.

        Args:
            queue: ``compaction_queue()`` (a tenant's own too), or any
                :class:`ExtractionQueue`.

        Raises:
            ValueError: the manager was made without ``history=``: the job reads the
                conversation from Redis, so the manager must name it.
            TypeError: ``queue`` has no blocking ``extract`` method.
        """
        if self._history is None:
            raise ValueError(
                "extraction reads the conversation from Redis: make the manager with "
                "history= (its RedisHistory or AsyncRedisHistory) to use with_extraction"
            )
        extract = getattr(queue, "extract", None)
        if not callable(extract) or inspect.iscoroutinefunction(extract):
            raise TypeError(
                f"with_extraction takes a queue with a blocking extract(history, agent_id, "
                f"user_id), such as compaction_queue()'s; got {type(queue).__name__}"
            )
        self._extraction = queue
        return self

    def with_summaries(self, summaries: Sequence[str]) -> Self:
        """Start from ``summaries`` (e.g. loaded from storage), oldest first, replacing any
        given before. With ``history=`` they stay in this process, sent before the shared
        ones."""
        self._summaries = list(summaries)
        return self

    @twin
    def summaries(self) -> Work[list[str]]:
        """The summaries kept so far, oldest first: the seeded ones, then (with ``history=``,
        read from Redis) the shared ones."""
        return self._summaries_plan()

    def _summaries_plan(self) -> Plan[_Step, list[str]]:
        return [*self._summaries, *(s.text for s in (yield from self._read_shared()))]

    def _read_shared(self) -> Plan[_Step, list[StoredSummary]]:
        if self._shared is None:
            return []
        summaries: list[StoredSummary] = yield self._shared.read()
        return summaries

    def strategy_name(self) -> Strategy:
        """The configured strategy."""
        return self.config.strategy

    @twin
    def prepare_messages(
        self,
        budget: int,
        system_message: str | None,
        history: Sequence[Message],
        current_turn: Sequence[Message] = (),
        memory_filters: MemoryFilters | None = None,
        *,
        format: WireFormat = "openai_chat",
    ) -> Work[PreparedRequest]:
        """The request for the next model call, fitted to ``budget``.

        Args:
            budget: The tokens the request may use, the reserve for the reply included.
            system_message: The system prompt; ``None`` to use the history's own.
            history: The stored conversation, oldest first (``history.snapshot()``).
            current_turn: Messages of the turn in progress not stored yet (the new user
                message, tool steps so far). The current turn is the history's last turn
                continued by these; it is always sent whole.
            memory_filters: Whose memories to recall; required when long-term memory is
                enabled. The query is the current turn's user messages (a question sent
                as two messages, by the lenient role rules, is asked whole).
            format: The wire format of the request.

        Returns:
            The rendered request, the same as messages, and diagnostics.

        Raises:
            BudgetExceededError: The system message (prompt, memories, summaries), the
                current turn and the reserve alone need more than ``budget``.
            ToolPairingError, RoleOrderError: ``history`` + ``current_turn`` is not a
                well-formed conversation (e.g. calls left unanswered).
            ValueError: Long-term memory enabled without a memory or without filters, a
                negative budget, an unknown format.
            TypeError: A :class:`HistoryManager`'s memory is asyncio, or an
                :class:`AsyncHistoryManager`'s memory blocks (``RedisLongTermMemory``).
        """
        yield _PLUGGED
        return (
            yield from self._prepare_plan(
                budget,
                system_message,
                history,
                current_turn=current_turn,
                memory_filters=memory_filters,
                format=format,
            )
        )

    def _prepare_plan(
        self,
        budget: int,
        system_message: str | None,
        history: Sequence[Message],
        *,
        current_turn: Sequence[Message],
        memory_filters: MemoryFilters | None,
        format: WireFormat,
    ) -> Plan[_Step, PreparedRequest]:
        """What :meth:`prepare_messages` does, asking for each read it makes."""

        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        framing, count = framing_of(format), self._counter
        split = split_turns([*history, *current_turn])
        prompts, stored_summaries = self._lead(system_message, split.lead)
        query = "\n".join(m.text for m in split.current if m.role == "user" and m.text)
        memory_block, recalled, kept_memories = yield from self._recall(query, memory_filters)
        live = yield from self._live_shared(history)
        summaries = [*stored_summaries, *self._summaries, *live]
        system_text = _join([*prompts, memory_block, *summaries])
        system_message_price = (
            price(Message.system(system_text), framing, count) if system_text else 0
        )
        memory_tokens = count.count(memory_block) if memory_block else 0
        summary_tokens = sum(count.count(s) for s in summaries)
        system_tokens = framing.request + system_message_price - memory_tokens - summary_tokens
        current_tokens = self._cost(split.current, framing)
        reserve = self.config.reserve_tokens
        parts = {
            "system": system_tokens,
            "memories": memory_tokens,
            "summaries": summary_tokens,
            "current_turn": current_tokens,
            "reserve": reserve,
        }
        room = budget - sum(parts.values())
        if room < 0:
            raise budget_error(
                budget, parts, "the system message, the current turn and the reserve"
            )
        older = split.older
        first = 0  # the oldest turn the strategy may keep
        if self.config.strategy == "sliding_window":
            first = max(0, len(older) - (self.config.window_turns - 1))
        kept_from, history_tokens = keep_newest(
            older[first:], room, lambda m: price(m, framing, count)
        )
        start = first + kept_from
        body = [*(m for turn in older[start:] for m in turn), *split.current]
        diagnostics = Diagnostics(
            budget=budget,
            reserve=reserve,
            system=system_tokens,
            memories=memory_tokens,
            summaries=summary_tokens,
            history=history_tokens,
            current_turn=current_tokens,
            total=system_tokens + memory_tokens + summary_tokens + history_tokens + current_tokens,
            dropped=tuple(m for turn in older[:start] for m in turn),
            dropped_turns=start,
            kept_turns=len(older) - start,
            memories_recalled=recalled,
            memories_kept=kept_memories,
        )
        request = render(body, format, system_text or None)
        messages = [Message.system(system_text), *body] if system_text else body
        return PreparedRequest(request, messages, diagnostics)

    @twin
    def on_turn_complete(
        self,
        evicted: Sequence[Message],
        agent_id: str,
        user_id: str | None = None,
        conversation_id: str | None = None,
    ) -> Work[str | None]:
        """Keep what a request left out: summarize it, remember it; enqueue the turn's
        extraction.

        Call it once the turn's messages are stored. With :meth:`with_extraction`, it first
        enqueues the extraction of the conversation's new messages into the memories of
        (``agent_id``, ``user_id``), whatever else is enabled. With ``enable_summarization``,
        the messages of ``evicted`` not summarized before (by id) are summarized, and the
        summary is kept (:meth:`summaries`); with ``enable_long_term_memory`` too, it is
        stored in long-term memory with ``agent_id``, ``user_id`` and ``conversation_id`` as
        metadata. Messages that leave every request once they are old are summarized once,
        not at every turn.

        Args:
            evicted: What the request left out (``PreparedRequest.dropped``).
            agent_id: The agent, stored with the memory, owner of the extracted memories.
            user_id: The user, stored with the memory when given, owner of the extracted
                memories with the agent.
            conversation_id: The conversation, stored with the memory when given.

        Returns:
            The new summary, or ``None`` when summarization is off, nothing new was evicted,
            or (with ``history=``) another pod summarizes it or took it over meanwhile.

        Raises:
            ValueError: Long-term memory enabled without a memory; with extraction, an
                unusable agent or user id (nothing is enqueued).
            SummarizerError: The summarizer failed (nothing is kept then; an extraction
                was enqueued before it).
            StoreUnavailableError, AccessDeniedError: with extraction, the queue's Redis
                could not be reached or refused the enqueue (before any summary).
            JobRefusedError: with extraction, a tenant's queue given another namespace's
                conversation.
            TypeError: A :class:`HistoryManager`'s memory or summarizer is asyncio, or an
                :class:`AsyncHistoryManager`'s memory blocks (``RedisLongTermMemory``).
        """
        yield _PLUGGED
        if self._extraction is not None:  # first: the worker extracts while this pod summarizes
            yield _Extract(self._extraction, agent_id, user_id)
        return (yield from self._turn_plan(evicted, agent_id, user_id, conversation_id))

    def _turn_plan(
        self,
        evicted: Sequence[Message],
        agent_id: str,
        user_id: str | None,
        conversation_id: str | None,
    ) -> Plan[_Step, str | None]:
        """What :meth:`on_turn_complete` does, asking for each call out it makes."""

        if not self.config.enable_summarization:
            return None
        if self._summarizer is None:
            self._summarizer = resolve_summarizer(None)
        if self._shared is not None:
            summary = yield from self._on_turn_shared(evicted, self._summarizer)
            if summary is None:
                return None
        else:
            fresh = [m for m in evicted if m.id not in self._summarized]
            if not fresh:
                return None
            summary = yield _Summarize(self._summarizer, fresh)
        if self.config.enable_long_term_memory:
            self._require_memory()
            filters = MemoryFilters(agent_id, user_id, conversation_id)
            yield _Remember(summary, {**filters.metadata(), "kind": "summary"})
        if self._shared is None:
            self._summaries.append(summary)
            self._summarized.update(m.id for m in evicted)
        return summary

    def _live_shared(self, history: Sequence[Message]) -> Plan[_Step, list[str]]:
        """The shared summaries whose messages are all still in ``history``; the others
        (compaction's summary stands for some of their messages) are noted as stale, for the
        next ``on_turn_complete`` to drop."""
        if self._shared is None:
            return []
        texts: list[str] = []
        stale: list[int] = []
        summaries = yield from self._read_shared()
        if summaries:
            ids = [m.id for m in history]
            positions = {message_id: i for i, message_id in enumerate(ids)}
            for summary in summaries:
                if summary.covers(positions, ids):
                    texts.append(summary.text)
                else:
                    stale.append(summary.seq)
        self._stale = stale
        return texts

    def _on_turn_shared(
        self, evicted: Sequence[Message], summarizer: Summarizer | AsyncSummarizer
    ) -> Plan[_Step, str | None]:
        """Claim the oldest run of evicted messages no pod summarized or is summarizing,
        summarize it and store the summary; ``None`` when another pod has them all, or took
        them over while this one summarized (its claim expired): nothing is stored then, and
        the next turn claims what is still unsummarized."""
        assert self._shared is not None
        offered = list(evicted)[-limits.MAX_SUMMARY_CANDIDATES :]
        token = os.urandom(8).hex()
        claim = self._shared.claim(
            [m.id for m in offered],
            token=token,
            now_ms=time.time_ns() // 1_000_000,
            claim_ms=round(self.config.summary_claim_seconds * 1000),
            stale=self._stale[: limits.MAX_SUMMARIES],
        )
        positions: list[int] = yield claim
        self._stale = []
        if not positions:  # another pod's, or no conversation to keep them in
            return None
        fresh = [offered[i] for i in positions]
        summary: str = yield _Summarize(summarizer, fresh)
        stored: int | None = yield self._shared.store(
            summary, [m.id for m in fresh], token=token, kept=self.config.max_summaries
        )
        return None if stored is None else summary

    def _cost(self, messages: Sequence[Message], framing: Framing) -> int:
        return sum(price(m, framing, self._counter) for m in messages)

    @staticmethod
    def _lead(system_message: str | None, lead: Sequence[Message]) -> tuple[list[str], list[str]]:
        """The prompts and the stored summaries of the system message, from the history's
        lead and the prompt given."""
        prompts = [system_message] if system_message else []
        summaries: list[str] = []
        fallback: str | None = None
        for message in lead:
            if _is_summary(message):
                summaries.append(_summary_text(message))
                stored = message.metadata.get("system_prompt")
                fallback = fallback or (stored if isinstance(stored, str) else None)
            elif message.content not in prompts:
                prompts.append(message.content)
        if not prompts and fallback:
            prompts.append(fallback)
        return prompts, summaries

    def _recall(
        self, query: str, filters: MemoryFilters | None
    ) -> Plan[_Step, tuple[str, int, int]]:
        """The memory block for the system message, how many memories were recalled and how
        many of them it holds."""
        if not self.config.enable_long_term_memory:
            return "", 0, 0
        self._require_memory()
        if filters is None:
            raise ValueError("long-term memory is enabled: pass memory_filters (an agent_id)")
        if not query or not self.config.recall_top_k:
            return "", 0, 0
        records: list[MemoryRecord] = yield _Recall(query, filters, self.config.recall_top_k)
        lines: list[str] = []
        limit = self.config.memory_token_budget
        for record in records:
            block = "\n".join([MEMORY_HEADER, *lines, f"- {record.text}"])
            if self._counter.count(block) <= limit:
                lines.append(f"- {record.text}")
        if not lines:
            return "", len(records), 0
        return "\n".join([MEMORY_HEADER, *lines]), len(records), len(lines)

    def _enqueue(self, step: _Extract) -> None:
        """Enqueue the extraction of this manager's conversation (in the caller's thread; a
        worker thread for :class:`AsyncHistoryManager`), a Redis failure raised typed."""
        history = self._history
        assert history is not None  # with_extraction requires it
        try:
            # CompactionQueue.extract reads the history's names only, which an
            # AsyncRedisHistory has as well (see ExtractionQueue).
            step.queue.extract(cast(RedisHistory, history), step.agent_id, step.user_id)
        except RedisFailure as exc:
            raise history.core.wrap(exc) from exc

    def _require_memory(self) -> LongTermMemory | AsyncLongTermMemory:
        if self._memory is None:
            raise ValueError("long-term memory is enabled: give one with .with_memory(memory)")
        return self._memory

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(strategy={self.config.strategy!r}, "
            f"summaries={len(self._summaries)}, memory={self._memory!r})"
        )


class HistoryManager(_Manager, Runner):
    """Builds each model call's request from a history, and keeps what was left out.

    One manager serves one conversation (its summaries are that conversation's); it is
    cheap to make. The ``with_*`` methods set its plug-ins and return the manager itself,
    for chaining. An asyncio pod uses :class:`AsyncHistoryManager`, its twin: the same
    methods as coroutines, following the same rules (one plan of steps runs both).
    """

    def run(self, work: Work[T]) -> T:
        """Drive an operation's plan: Redis through the sync history, the plug-ins called
        in this thread."""
        history = self._history
        if isinstance(history, AsyncRedisHistory):
            raise TypeError(
                "this manager's history is an AsyncRedisHistory: use an AsyncHistoryManager"
            )
        return drive(cast(Plan[_Step, T], work), self._do)

    def _do(self, step: _Step) -> Any:
        if isinstance(step, Call):
            assert isinstance(self._history, RedisHistory)
            return self._history.execute(step)
        if step is _PLUGGED:
            return self._check_plugged()
        if isinstance(step, _Extract):
            return self._enqueue(step)
        if isinstance(step, _Summarize):
            return cast(Summarizer, step.summarizer).summarize(step.messages)
        memory = cast(LongTermMemory, self._memory)
        return memory.recall(*step) if isinstance(step, _Recall) else memory.store(*step)

    def _check_plugged(self) -> None:
        """Refuse, before the first step of an operation that may call them, an asyncio
        memory or summarizer."""
        if self._memory is not None and _is_async(self._memory):
            raise TypeError(
                f"this manager's memory ({type(self._memory).__name__}) is asyncio: use an "
                "AsyncHistoryManager"
            )
        if _is_coroutine(self._summarizer, "summarize"):
            raise TypeError(
                f"this manager's summarizer ({type(self._summarizer).__name__}) is asyncio: "
                "use an AsyncHistoryManager"
            )

    async def aprepare_messages(self, *args: Any, **kwargs: Any) -> PreparedRequest:
        """Deprecated: :meth:`AsyncHistoryManager.prepare_messages`."""
        moved("HistoryManager.aprepare_messages", "AsyncHistoryManager.prepare_messages")
        return await _as_async(self).prepare_messages(*args, **kwargs)

    async def aon_turn_complete(self, *args: Any, **kwargs: Any) -> str | None:
        """Deprecated: :meth:`AsyncHistoryManager.on_turn_complete`."""
        moved("HistoryManager.aon_turn_complete", "AsyncHistoryManager.on_turn_complete")
        return await _as_async(self).on_turn_complete(*args, **kwargs)

    async def asummaries(self) -> list[str]:
        """Deprecated: :meth:`AsyncHistoryManager.summaries`."""
        moved("HistoryManager.asummaries", "AsyncHistoryManager.summaries")
        return await _as_async(self).summaries()


class AsyncHistoryManager(_Manager, AsyncRunner):
    """:class:`HistoryManager` for asyncio pods: the same methods, as coroutines, that never
    block the event loop: Redis is awaited, a blocking summarizer runs in a worker thread
    (one whose ``summarize`` is a coroutine is awaited), and so does a memory without
    I/O to wait on (``in_memory``); an extraction's enqueue (a blocking RQ call) runs in a
    worker thread too."""

    _histories = (AsyncRedisHistory,)

    async def run(self, work: Work[T]) -> T:
        """:meth:`HistoryManager.run`, awaited."""
        if isinstance(self._history, RedisHistory):
            raise TypeError(
                "this manager's history is a RedisHistory, which blocks the event loop: give "
                "it an AsyncRedisHistory"
            )
        if isinstance(self._memory, RedisLongTermMemory):
            raise TypeError(
                "this manager's memory is a RedisLongTermMemory, which blocks the event loop: "
                "give it an AsyncRedisLongTermMemory"
            )
        return await adrive(cast(Plan[_Step, T], work), self._do)

    async def _do(self, step: _Step) -> Any:
        if isinstance(step, Call):
            assert isinstance(self._history, AsyncRedisHistory)
            return await self._history.execute(step)
        if step is _PLUGGED:
            return None
        if isinstance(step, _Extract):  # a blocking RQ enqueue: off the event loop
            return await asyncio.to_thread(self._enqueue, step)
        if isinstance(step, _Summarize):
            summarizer: Any = step.summarizer
            if _is_coroutine(summarizer, "summarize"):
                return await summarizer.summarize(step.messages)
            return await asyncio.to_thread(summarizer.summarize, step.messages)
        plugged: Any = self._memory  # an AsyncLongTermMemory, or one with no I/O to wait on
        done = plugged.recall(*step) if isinstance(step, _Recall) else plugged.store(*step)
        return await done if inspect.isawaitable(done) else done


def _as_async(manager: HistoryManager) -> AsyncHistoryManager:
    """An :class:`AsyncHistoryManager` over ``manager``'s state (its deprecated coroutines)."""
    twin = AsyncHistoryManager.__new__(AsyncHistoryManager)
    twin.__dict__ = manager.__dict__
    return twin
