"""The compactors a worker knows by name, and :func:`resolve_compactor`.

Apart from :mod:`~redis_history.compaction.compactors.base`, which the compactors import for
the request they are given, so that no import runs in a circle."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from redis_history.compaction.compactors.base import Compactor
from redis_history.compaction.compactors.elide import ToolOutputElider
from redis_history.compaction.compactors.summarize import SummarizingCompactor
from redis_history.plugins import PluginKind

__all__ = ["ALIASES", "DEFAULT_COMPACTOR", "resolve_compactor"]

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
