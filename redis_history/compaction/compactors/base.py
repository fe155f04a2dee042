"""The Compactor protocol, the request a compactor is given, and resolve_compactor."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, TypeAlias, runtime_checkable

from redis_history._plugins import PluginKind
from redis_history.compaction.compactors.elide import ToolOutputElider
from redis_history.compaction.compactors.summarize import SummarizingCompactor
from redis_history.compaction.policy import CompactionContext, CompactionPolicy
from redis_history.compaction.summarizers import Summarizer
from redis_history.models import Message
from redis_history.tokens import TokenCounter
from redis_history.turns import Turn, to_messages

__all__ = [
    "ALIASES",
    "DEFAULT_COMPACTOR",
    "Compactor",
    "CompactorRequest",
    "Replacement",
    "resolve_compactor",
]


@dataclass(frozen=True, slots=True)
class CompactorRequest:
    """What a compactor is given: the conversation, its policy, and the turns it may compact.

    The turns are the conversation's prefix before the tail the policy protects,
    cut at a turn boundary (never inside a tool pair), grouped by
    :func:`~redis_history.group_entries`: the first turn's lead holds the system
    prompt or the summaries an earlier compaction wrote.
    """

    context: CompactionContext
    """The conversation's namespace and id, and the policy."""
    turns: tuple[Turn, ...]
    """The whole turns the compactor may replace, oldest first."""
    tokens: tuple[int, ...]
    """The stored token count of each message of :attr:`messages`, in order."""
    token_counter: TokenCounter
    """The worker's counter, to price what the compactor writes."""
    summarizer: Summarizer
    """The worker's configured summarizer, for compactors that summarize."""

    @property
    def namespace(self) -> str:
        """The conversation's namespace."""
        return self.context.namespace

    @property
    def conversation_id(self) -> str:
        """The conversation's id."""
        return self.context.conversation_id

    @property
    def policy(self) -> CompactionPolicy:
        """The policy the compaction runs under."""
        return self.context.policy

    @property
    def messages(self) -> list[Message]:
        """The turns' messages, in order, exactly as stored."""
        return to_messages(self.turns)


Replacement: TypeAlias = Sequence[Message | Turn] | None
"""What a compactor returns: the messages (or whole turns, flattened in order) that take
the place of exactly the turns it was given; ``None`` or empty when it has nothing to do."""


@runtime_checkable
class Compactor(Protocol):
    """Decides what replaces the oldest turns of a conversation.

    The worker calls :meth:`compact` under the conversation's lock and writes
    what it returns back with the same fenced ``splice_prefix`` whatever the
    compactor: only if the lock is still held and the prefix is unchanged, the
    originals going to the archive. Before that, the replacement is checked
    against the tail (role order, tool pairing); one that does not fit raises
    :class:`~redis_history.errors.CompactorError` and nothing is written.
    """

    def compact(self, request: CompactorRequest) -> Replacement:
        """What replaces ``request.turns``; ``None`` (or empty) for nothing to do."""
        ...


DEFAULT_COMPACTOR = "summarize"
"""The alias a worker uses when nothing is configured."""

ALIASES: Mapping[str, Callable[[], Compactor]] = MappingProxyType(
    {
        "summarize": SummarizingCompactor,
        "elide-tool-output": ToolOutputElider,
    }
)
"""Compactor names :func:`resolve_compactor` knows, each with the factory it calls."""


def _expected() -> str:
    return (
        f"a Compactor (an object with compact(request) -> messages or None), an alias "
        f"({', '.join(sorted(ALIASES))}), or a dotted path 'package.module:attr' to a "
        "compactor, its class or a zero-argument factory"
    )


_KIND: PluginKind[Compactor] = PluginKind(Compactor, "Compactor", "compactor", "compact", _expected)


def resolve_compactor(spec: Compactor | type[Compactor] | str | None) -> Compactor:
    """The compactor ``spec`` names.

    Args:
        spec: ``None`` for the default (``summarize``); a :class:`Compactor`
            (returned as is; a compactor class is instantiated); an alias from
            :data:`ALIASES` (``summarize`` for :class:`SummarizingCompactor`,
            ``elide-tool-output`` for :class:`ToolOutputElider`); or a dotted path
            ``package.module:attr`` or ``package.module.attr`` to a compactor, its
            class or a zero-argument factory.

    Returns:
        The compactor.

    Raises:
        ValueError: a name that is no alias nor an importable path.
        TypeError: an object (or what a path names) that is not a ``Compactor``,
            or a class or factory that needs arguments.
    """
    return _KIND.resolve(DEFAULT_COMPACTOR if spec is None else spec, ALIASES)
