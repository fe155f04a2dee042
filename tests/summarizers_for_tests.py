"""Summarizers that the job tests name by dotted path, the way a worker's settings do."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from redis_history.compaction.summarizers import SummarizerError
from redis_history.compaction_policy import CompactionContext
from redis_history.models import Message

TAG = "Previously (from the worker's settings):"


class Tagging:
    """Joins the user messages under a tag, so a test can tell which summarizer ran."""

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """The tag, then every user message."""
        return f"{TAG} " + " / ".join(m.content for m in messages if m.role == "user")


class Failing:
    """Always fails, like a model endpoint that is down."""

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """Raise :class:`SummarizerError`."""
        raise SummarizerError("the model endpoint is down")


class Counting:
    """Summarizes by joining the user messages' first words; records its calls and the threads
    they ran on (thread-safe: pods on threads share one)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """``Previously:`` and the user messages' first words."""
        with self._lock:
            self.calls.append([m.id for m in messages])
            self.threads.add(threading.get_ident())
        return "Previously: " + " / ".join(m.content[:10] for m in messages if m.role == "user")
