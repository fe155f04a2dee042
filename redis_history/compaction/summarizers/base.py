"""The Summarizer protocol, and resolve_summarizer: a summarizer from an object, alias or path."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from redis_history.compaction.summarizers.extractive import ExtractiveSummarizer
from redis_history.compaction.summarizers.openai_compatible import OpenAICompatibleSummarizer
from redis_history.compaction_policy import CompactionContext
from redis_history.models import Message
from redis_history.plugins import PluginKind

__all__ = ["ALIASES", "AsyncSummarizer", "Summarizer", "resolve_summarizer", "summarize"]


@runtime_checkable
class Summarizer(Protocol):
    """Turns messages into summary text, told the conversation it summarizes: compaction
    passes a :class:`~redis_history.compaction_policy.CompactionContext` (namespace,
    conversation id, policy) as ``context=``; a direct call may leave it out."""

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """The summary of ``messages``."""
        ...


@runtime_checkable
class AsyncSummarizer(Protocol):
    """A :class:`Summarizer` whose ``summarize`` is a coroutine: the context layer's
    coroutines await it (compaction workers take a :class:`Summarizer`)."""

    async def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """The summary of ``messages``."""
        ...


def summarize(
    summarizer: Summarizer, messages: Sequence[Message], context: CompactionContext
) -> Any:
    """``summarizer``'s summary of ``messages`` in ``context``, returned unchecked (the caller
    checks it is text)."""
    return summarizer.summarize(messages, context=context)


ALIASES: Mapping[str, Callable[[], Summarizer]] = MappingProxyType(
    {
        "extractive": ExtractiveSummarizer,
        "openai": OpenAICompatibleSummarizer.from_env,
    }
)
"""Summarizer names :func:`resolve_summarizer` knows, each with the factory it calls."""


def _expected() -> str:
    return (
        f"a Summarizer (an object with summarize(messages, *, context=None) -> str), an alias "
        f"({', '.join(sorted(ALIASES))}), or a dotted path 'package.module:attr' to a "
        "summarizer, its class or a zero-argument factory"
    )


_KIND: PluginKind[Summarizer] = PluginKind(
    Summarizer, "Summarizer", "summarizer", "summarize", _expected
)


def resolve_summarizer(spec: Summarizer | str | None) -> Summarizer:
    """The summarizer ``spec`` names.

    Args:
        spec: ``None`` for a new :class:`ExtractiveSummarizer`; a
            :class:`Summarizer` (returned as is; a summarizer class is
            instantiated); an alias from :data:`ALIASES` (``extractive``, or
            ``openai`` for :meth:`OpenAICompatibleSummarizer.from_env`); or a
            dotted path ``package.module:attr`` or ``package.module.attr`` to a
            summarizer, its class or a zero-argument factory (after the colon,
            ``Class.method`` is allowed).

    Returns:
        The summarizer.

    Raises:
        ValueError: a name that is no alias nor an importable path.
        TypeError: an object (or what a path names) that is not a ``Summarizer``,
            or a class or factory that needs arguments.
    """
    return _KIND.resolve("extractive" if spec is None else spec, ALIASES)
