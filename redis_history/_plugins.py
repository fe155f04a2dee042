"""Plug-ins (token counters, summarizers): an object, or a class or factory that makes one.

Both kinds are checked the same way against their ``runtime_checkable``
protocol, so a misfit gets the same clear ``TypeError`` naming what was given
and what was expected.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

__all__ = ["PluginKind"]

T = TypeVar("T")


@dataclass(frozen=True)
class PluginKind(Generic[T]):
    """One kind of plug-in: its protocol, the method that must be callable, how to describe it."""

    protocol: Any
    """The ``runtime_checkable`` protocol an instance must satisfy (``type[T]`` at heart)."""
    name: str
    """The protocol's name in errors, e.g. ``TokenCounter``."""
    method: str
    """The method an instance must have and be able to call."""
    expected: Callable[[], str]
    """What a valid specification looks like, for error messages."""

    def checked(self, candidate: object, origin: str) -> T:
        """``candidate`` if it is a usable instance, else a ``TypeError`` naming ``origin``."""
        if (
            isinstance(candidate, type)
            or not isinstance(candidate, self.protocol)
            or not callable(getattr(candidate, self.method, None))
        ):
            raise TypeError(
                f"{origin} is not a {self.name}: got {type(candidate).__name__}; "
                f"expected {self.expected()}"
            )
        return cast(T, candidate)

    def from_target(self, target: object, spec: str) -> T:
        """What a dotted path names: an instance as is; a class or factory called without args."""
        if not callable(target) or (
            isinstance(target, self.protocol) and not isinstance(target, type)
        ):
            return self.checked(target, repr(spec))
        try:
            inspect.signature(target).bind()
        except TypeError as exc:
            raise TypeError(f"{spec!r} cannot be called without arguments: {exc}") from exc
        except ValueError:
            pass  # no introspectable signature (some builtins): just call it
        return self.checked(target(), f"what {spec!r} returned")
