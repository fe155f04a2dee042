"""Test doubles shipped with the library and supported like the rest of it.

:class:`InMemoryHistory` is the reference :class:`RedisHistory` semantics in
plain Python: the same validation, token accounting, splice and truncate rules,
with no Redis. Use it in your own unit tests; redis-history's contract suite
runs every backend against it. :class:`FakeSummarizer` stands in for an LLM
summarizer: it records what it was given and answers (or fails) as told.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis_history._core import DEFAULT_MAX_MESSAGE_BYTES
from redis_history.codec import Entry, encode_message
from redis_history.errors import InvalidMessageError, LockLostError, StaleSnapshotError
from redis_history.keys import DEFAULT_NAMESPACE, ConversationKeys
from redis_history.models import Message
from redis_history.roles import RoleState
from redis_history.tokens import TokenCounter, resolve_counter

__all__ = ["FakeSummarizer", "InMemoryHistory"]


@dataclass(frozen=True, slots=True)
class _Stored:
    message: Message
    tokens: int
    exact: bool
    summary: bool = False

    def entry(self) -> Entry:
        return Entry(
            tokens=self.tokens, exact=self.exact, summary=self.summary, message=self.message
        )


class InMemoryHistory:
    """A single-process history with exactly :class:`~redis_history.RedisHistory`'s semantics."""

    def __init__(
        self,
        conversation_id: str = "memory",
        *,
        namespace: str = DEFAULT_NAMESPACE,
        token_counter: TokenCounter | str | None = None,
        validate: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        """Validate the names as the Redis history does; options mean the same."""
        ConversationKeys.build(conversation_id, namespace)
        self.conversation_id = conversation_id
        self.namespace = namespace
        self.token_counter = resolve_counter(token_counter)
        self.validate = validate
        self.max_message_bytes = max_message_bytes
        self.lock_token: str | None = None
        """The compaction lock holder; ``splice_prefix(lock_token=...)`` is fenced on it."""
        self._clear()

    def _clear(self) -> None:
        self._items: list[_Stored] = []
        self._archive: list[_Stored] = []
        self._state = RoleState()
        self._baseline: int | None = None
        self._since = 0
        self._exists = False

    def _stored(self, messages: Sequence[Message], *, summary: bool = False) -> list[_Stored]:
        exact = self.token_counter.exact
        stored = []
        for index, message in enumerate(messages):
            try:
                _, tokens = encode_message(
                    message,
                    self.token_counter,
                    self.max_message_bytes,
                    summary=summary,
                    index=index,
                )
            except InvalidMessageError as exc:
                exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
                raise
            stored.append(_Stored(message, tokens, exact, summary))
        return stored

    def _checked(self, state: RoleState, messages: Sequence[Message]) -> None:
        try:
            state.advance_all(messages, check=self.validate)
        except InvalidMessageError as exc:
            exc.conversation_id, exc.namespace = self.conversation_id, self.namespace
            raise

    def _reset_baseline(self) -> None:
        self._baseline, self._since = None, 0
        self._exists = True

    def append(self, message: Message) -> None:
        """Add one message at the tail."""
        self.append_many([message])

    def append_many(self, messages: Sequence[Message]) -> None:
        """Add a batch, all or none."""
        stored = self._stored(messages)
        state = self._state.copy()
        self._checked(state, messages)
        self._items.extend(stored)
        self._state = state
        self._since += sum(s.tokens for s in stored)
        self._exists = True

    def replace(self, messages: Sequence[Message]) -> None:
        """Replace every message; resets the baseline."""
        stored = self._stored(messages)
        state = RoleState()
        self._checked(state, messages)
        self._items, self._state = stored, state
        self._reset_baseline()

    def splice_prefix(
        self,
        drop_count: int,
        summary: Message | Sequence[Message],
        *,
        expected_ids: Sequence[str] | None = None,
        lock_token: str | None = None,
    ) -> int:
        """Replace the first ``drop_count`` messages with ``summary``; returns how many dropped."""
        summaries = [summary] if isinstance(summary, Message) else list(summary)
        if not summaries:
            raise ValueError("splice_prefix needs at least one summary message")
        if drop_count < 0:
            raise ValueError(f"drop_count must be >= 0, got {drop_count}")
        if expected_ids is not None and len(expected_ids) != drop_count:
            raise ValueError(
                f"expected_ids names {len(expected_ids)} messages, drop_count is {drop_count}"
            )
        stored = self._stored(summaries, summary=True)
        if lock_token is not None and lock_token != self.lock_token:
            raise LockLostError("the compaction lock is not held by this token")
        n = min(drop_count, len(self._items))
        if expected_ids is not None:
            current = [s.message.id for s in self._items[:n]]
            if current != list(expected_ids):
                raise StaleSnapshotError("the summarized prefix is no longer the conversation's")
        if n == 0:
            return 0
        if n == len(self._items):
            self._state = RoleState.of(summaries)
        self._archive.extend(self._items[:n])
        self._items[:n] = stored
        self._reset_baseline()
        self._exists = True
        return n

    def truncate(self, n: int) -> int:
        """Keep at most ``n`` messages; returns how many were removed."""
        if n < 0:
            raise ValueError(f"truncate keeps n >= 0 messages, got {n}")
        removed = len(self._items) - n
        if removed <= 0:
            return 0
        del self._items[n:]
        self._state = RoleState.of(s.message for s in self._items)
        self._reset_baseline()
        return removed

    def record_input_tokens(self, n: int) -> None:
        """Make ``n`` the baseline."""
        if n < 0:
            raise ValueError(f"input tokens must be >= 0, got {n}")
        self._baseline, self._since = n, 0
        self._exists = True

    def token_estimate(self) -> int | None:
        """Baseline plus tokens since, else the total; ``None`` when empty."""
        total = sum(s.tokens for s in self._items)
        if not total:
            return None
        if self._baseline is not None:
            return self._baseline + self._since
        return total

    def snapshot(self) -> list[Message]:
        """Every live message, in order."""
        return [s.message for s in self._items]

    def entries(self) -> list[Entry]:
        """Every live message with its token count and summary flag."""
        return [s.entry() for s in self._items]

    def tail(self, n: int) -> list[Message]:
        """The last ``n`` messages."""
        if n < 0:
            raise ValueError(f"tail needs n >= 0, got {n}")
        return self.snapshot()[len(self._items) - n :] if n else []

    def range(self, start: int = 0, stop: int | None = None) -> list[Message]:
        """Messages ``[start:stop]``."""
        return self.snapshot()[start:stop]

    def transcript(self) -> list[Message]:
        """Archived originals then live messages, without summaries."""
        return [s.message for s in (*self._archive, *self._items) if not s.summary]

    def len(self) -> int:
        """Number of live messages."""
        return len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def is_empty(self) -> bool:
        """Whether there are no messages."""
        return not self._items

    def delete(self) -> bool:
        """Forget everything; whether anything existed."""
        existed = self._exists
        self._clear()
        return existed


class FakeSummarizer:
    """A summarizer that records each call and answers with ``text``, or raises ``error``."""

    def __init__(
        self, text: str = "Previously: (a fake summary)", *, error: Exception | None = None
    ) -> None:
        """Answer every call with ``text``, or raise ``error`` when one is given."""
        self.text = text
        self.error = error
        self.calls: list[list[Message]] = []
        """The messages of every call, oldest call first."""

    def summarize(self, messages: Sequence[Message]) -> str:
        """Record ``messages``; return :attr:`text` or raise :attr:`error`."""
        self.calls.append(list(messages))
        if self.error is not None:
            raise self.error
        return self.text

    async def asummarize(self, messages: Sequence[Message]) -> str:
        """The same as :meth:`summarize`."""
        return self.summarize(messages)
