"""Plug-ins (token counters, summarizers): one dotted-path importer and one fit check for all kinds.

A plug-in is given as an object, a class or zero-argument factory that makes
one, or a dotted path to any of those. :func:`import_path` is the only place
that imports a path; :class:`PluginKind` checks what it found against the
kind's ``runtime_checkable`` protocol. Every misfit is an error naming what was
given, what went wrong and what is expected.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

__all__ = ["PluginKind", "PluginPathError", "import_path"]

T = TypeVar("T")

Failure = Literal["malformed", "no module", "import failed", "no attribute"]


class PluginPathError(ValueError):
    """A dotted path that names nothing usable; :attr:`failure` says which step failed."""

    def __init__(self, message: str, *, failure: Failure, problem: str) -> None:
        super().__init__(message)
        self.failure: Failure = failure
        """``malformed`` (not shaped like a path), ``no module`` (the path's module does not
        exist), ``import failed`` (importing it raised) or ``no attribute``."""
        self.problem = problem
        """What went wrong, without the spec and the expectation around it."""


def _split(spec: str) -> tuple[str, list[str]] | None:
    """``(module, attributes)`` of ``package.module:attr.sub`` or ``package.module.attr``."""
    if ":" in spec:
        module_name, _, attr_path = spec.partition(":")
    else:
        module_name, _, attr_path = spec.rpartition(".")
    attrs = attr_path.split(".")
    if not module_name or not all(p.isidentifier() for p in [*module_name.split("."), *attrs]):
        return None
    return module_name, attrs


def import_path(spec: str, noun: str, expected: str) -> object:
    """The object a dotted path names.

    Args:
        spec: ``package.module:attr`` (after the colon a dotted ``Class.attr`` is
            allowed) or ``package.module.attr``.
        noun: what the path should name, for the error, e.g. ``summarizer``.
        expected: what a valid specification looks like, for the error.

    Returns:
        The object, not checked against any protocol.

    Raises:
        PluginPathError: ``spec`` is not shaped like a path, its module does
            not exist or fails to import, or the attribute is missing. The
            message reads ``unknown <noun> '<spec>': <problem>; expected <expected>``.
    """

    def fail(failure: Failure, problem: str) -> PluginPathError:
        message = f"unknown {noun} {spec!r}: {problem}; expected {expected}"
        return PluginPathError(message, failure=failure, problem=problem)

    parts = _split(spec)
    if parts is None:
        raise fail("malformed", "not a dotted path 'package.module:attr'")
    module_name, attrs = parts
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only the path's own module (or a parent package) missing means "no such path";
        # a module the plug-in itself fails to import is an import failure like any other.
        own = exc.name is not None and (module_name + ".").startswith(exc.name + ".")
        problem = f"cannot import {module_name!r}: {exc}"
        if own:
            raise fail("no module", problem) from exc
        raise fail("import failed", problem) from exc
    except Exception as exc:
        raise fail(
            "import failed", f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for depth, attr in enumerate(attrs):
        try:
            target = getattr(target, attr)
        except AttributeError:
            owner = ".".join([module_name, *attrs[:depth]])
            raise fail("no attribute", f"{owner!r} has no attribute {attr!r}") from None
    return target


@dataclass(frozen=True)
class PluginKind(Generic[T]):
    """One kind of plug-in: its protocol, the method that must be callable, how to describe it."""

    protocol: Any
    """The ``runtime_checkable`` protocol an instance must satisfy (``type[T]`` at heart)."""
    name: str
    """The protocol's name in errors, e.g. ``TokenCounter``."""
    noun: str
    """What one is called in prose, e.g. ``token counter``."""
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

    def from_path(self, spec: str) -> T:
        """The plug-in a dotted path names, made and checked.

        Raises:
            PluginPathError: see :func:`import_path`.
            TypeError: what the path names is not of this kind, or needs arguments.
        """
        return self.from_target(import_path(spec, self.noun, self.expected()), spec)

    def resolve(self, spec: object, aliases: Mapping[str, Callable[[], T]]) -> T:
        """The plug-in ``spec`` names: an alias (a fresh one from ``aliases``), a dotted path,
        a class or zero-argument factory (called), or an instance (checked).

        Raises:
            ValueError: a name that is no alias nor an importable path.
            TypeError: an object (or what a path names) not of this kind, or one that needs
                arguments.
        """
        if isinstance(spec, str):
            factory = aliases.get(spec)
            if factory is not None:
                return factory()
            if ":" not in spec and "." not in spec:
                raise ValueError(f"unknown {self.noun} {spec!r}; expected {self.expected()}")
            return self.from_path(spec)
        if isinstance(spec, type):
            return self.from_target(spec, spec.__qualname__)
        return self.checked(spec, f"the {type(spec).__name__} given")
