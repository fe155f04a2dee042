"""The Summarizer protocol, and resolve_summarizer: a summarizer from an object, alias or path."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from redis_history._plugins import PluginKind
from redis_history.models import Message
from redis_history.policy import CompactionContext
from redis_history.summarizers.extractive import ExtractiveSummarizer
from redis_history.summarizers.openai_compatible import OpenAICompatibleSummarizer

__all__ = ["ALIASES", "Summarizer", "resolve_summarizer", "summarize", "takes_context"]


@runtime_checkable
class Summarizer(Protocol):
    """Turns messages into summary text.

    A summarizer may also take the conversation it summarizes: when its
    ``summarize`` accepts a ``context`` keyword (or ``**kwargs``), compaction passes
    a :class:`~redis_history.policy.CompactionContext` (namespace, conversation id,
    policy) as ``context=``; one with the one-argument signature is called as before.
    See :func:`takes_context`.
    """

    def summarize(self, messages: Sequence[Message]) -> str:
        """The summary of ``messages``."""
        ...


def takes_context(summarizer: Summarizer) -> bool:
    """Whether ``summarizer.summarize`` accepts ``context=`` (by name, or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(summarizer.summarize).parameters.values()
    except (TypeError, ValueError):  # no introspectable signature: call it the old way
        return False
    return any(
        p.kind is p.VAR_KEYWORD
        or (p.name == "context" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        for p in parameters
    )


def summarize(
    summarizer: Summarizer, messages: Sequence[Message], context: CompactionContext
) -> Any:
    """``summarizer``'s summary of ``messages``, passing ``context`` if it takes one.

    The result is returned unchecked (the caller checks it is text).
    """
    if takes_context(summarizer):
        return summarizer.summarize(messages, context=context)  # type: ignore[call-arg]
    return summarizer.summarize(messages)


ALIASES: Mapping[str, Callable[[], Summarizer]] = MappingProxyType(
    {
        "extractive": ExtractiveSummarizer,
        "openai": OpenAICompatibleSummarizer.from_env,
    }
)
"""Summarizer names :func:`resolve_summarizer` knows, each with the factory it calls."""


def _expected() -> str:
    return (
        f"a Summarizer (an object with summarize(messages) -> str), an alias "
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
