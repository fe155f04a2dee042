"""One compaction of one conversation: lock, snapshot, cut, summarize, fenced write-back.

This is the worker's job without RQ (``jobs.py`` wraps it), so it can be run
and tested directly. The lock is redis-py's :class:`redis.lock.Lock` (random
token, ``SET NX PX``, compare-and-delete release), extended by a heartbeat
while the summarizer runs; the write-back passes the token to
``splice_prefix``, whose script refuses it if the lock changed hands.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import LockError

from redis_history.errors import (
    InvalidTransition,
    LockLostError,
    StaleSnapshotError,
    SummarizerError,
)
from redis_history.history import RedisHistory
from redis_history.models import Message
from redis_history.policy import CompactionPolicy
from redis_history.roles import RoleState
from redis_history.summarizers import Summarizer
from redis_history.tokens import message_tokens

__all__ = ["CompactionResult", "Cut", "choose_cut", "run_compaction"]

Status = Literal["compacted", "skipped", "busy", "exhausted", "stale", "lock_lost"]


@dataclass(frozen=True, slots=True)
class Cut:
    """Where to cut: replace ``messages[:drop]`` by a summary of ``messages[head:drop]``."""

    head: int
    drop: int


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What one compaction job did."""

    status: Status
    dropped: int = 0
    tokens_freed: int = 0


def choose_cut(
    messages: Sequence[Message], tokens: Sequence[int], policy: CompactionPolicy
) -> Cut | None:
    """The latest turn boundary that keeps the policy's tail verbatim, or ``None``.

    Turns start at user messages; a user message cannot come while tool calls
    are open, so a cut there never splits a tool call from its result.

    Raises:
        InvalidMessageError: the log breaks role order or tool pairing.
    """
    RoleState().advance_all(messages)
    head = 1 if messages and messages[0].role == "system" else 0
    starts = [i for i, m in enumerate(messages) if m.role == "user" and i > head]
    if policy.keep_last_turns:
        starts = starts[: len(starts) - policy.keep_last_turns + 1]
    starts = [i for i in starts if sum(tokens[i:]) >= policy.keep_last_tokens]
    if not starts or starts[-1] - head < policy.min_messages:
        return None
    return Cut(head=head, drop=starts[-1])


def _summary_message(messages: Sequence[Message], cut: Cut, text: str, tokens: int) -> Message:
    """One system message: the original system prompt verbatim, then the summary."""
    first = messages[0] if cut.head else None
    prompt = (first.metadata.get("system_prompt", first.content) if first else "") or ""
    content = f"{prompt}\n\n{text}" if prompt else text
    return Message.system(
        content,
        metadata={
            "summary": True,
            "system_prompt": prompt,
            "covers": [m.id for m in messages[cut.head : cut.drop]],
            "tokens_replaced": tokens,
        },
    )


class _Heartbeat:
    """Extends the lock every third of its TTL until stopped."""

    def __init__(self, lock: Any, ttl: float) -> None:
        self._lock, self._ttl = lock, ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            try:
                self._lock.extend(self._ttl, replace_ttl=True)
            except LockError:
                return  # lost: the fenced write-back will be refused

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_compaction(
    history: RedisHistory, summarizer: Summarizer, policy: CompactionPolicy
) -> CompactionResult:
    """Compact ``history`` once under its lock; never raises for a lost race, reports it.

    Under the lock, the policy is asked again whether compaction is due: a job
    that waited in the queue while another compacted the conversation, or a
    duplicate, finds nothing to do and reports ``skipped`` without touching the
    state (only a compaction that is due and cannot help exhausts it).

    Raises:
        InvalidMessageError: the stored log is malformed (role order, tool pairing).
        HistoryError: Redis refused or was unreachable; the summarizer's own errors pass through.
    """
    lock = history.client.lock(
        history.keys.lock, timeout=policy.lock_ttl_seconds, blocking=False, thread_local=False
    )
    if not lock.acquire():
        return CompactionResult("busy")
    token = lock.local.token
    token = token.decode() if isinstance(token, bytes) else str(token)
    try:
        with _Heartbeat(lock, policy.lock_ttl_seconds):
            if not policy.should_compact(*history.compaction_status()):
                return CompactionResult("skipped")
            for attempt in range(2):
                try:
                    return _compact_once(history, summarizer, policy, token)
                except StaleSnapshotError:
                    if attempt:
                        return CompactionResult("stale")
                except LockLostError:
                    return CompactionResult("lock_lost")
            raise AssertionError("unreachable")
    finally:
        with contextlib.suppress(LockError):  # expired: the write-back was fenced anyway
            lock.release()


def _compact_once(
    history: RedisHistory, summarizer: Summarizer, policy: CompactionPolicy, token: str
) -> CompactionResult:
    entries = history.entries()
    messages = [e.message for e in entries]
    tokens = [e.tokens for e in entries]
    cut = choose_cut(messages, tokens, policy)
    if cut is None:
        _exhaust(history)
        return CompactionResult("exhausted")
    replaced = sum(tokens[: cut.drop])
    text = summarizer.summarize(messages[: cut.drop])
    if not isinstance(text, str) or not text.strip():
        raise SummarizerError(
            f"{type(summarizer).__name__}.summarize returned {type(text).__name__} "
            f"{str(text)[:40]!r}, not summary text",
            conversation_id=history.conversation_id,
            namespace=history.namespace,
        )
    summary = _summary_message(messages, cut, text, replaced)
    dropped = history.splice_prefix(
        cut.drop,
        summary,
        expected_ids=[m.id for m in messages[: cut.drop]],
        lock_token=token,
    )
    freed = max(0, replaced - message_tokens(summary, history.token_counter))
    with contextlib.suppress(InvalidTransition):  # state moved meanwhile; the splice stands
        history.compaction_event("compacted", policy.cooldown_turns, freed)
    estimate = history.token_estimate() or 0
    if freed == 0 or estimate >= policy.hard_tokens:
        _exhaust(history)
    return CompactionResult("compacted", dropped, freed)


def _exhaust(history: RedisHistory) -> None:
    with contextlib.suppress(InvalidTransition):  # not reachable from Cooling
        history.compaction_event("exhausted")
