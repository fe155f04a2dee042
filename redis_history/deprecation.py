"""What keeps an old import path or name working after it moved, telling the caller where to."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["moved", "moved_to"]


def moved_to(module: ModuleType, old: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the old module ``old`` whose names now live in ``module``:
    each public name of ``module`` resolves, with a ``DeprecationWarning`` naming its new
    place; any other is an ``AttributeError``. (The old module keeps no ``__all__``: a star
    import of it gives nothing.)"""
    names = frozenset(module.__all__)

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} moved to {module.__name__}.{name}", DeprecationWarning, stacklevel=2
        )
        return getattr(module, name)

    return __getattr__


def moved(old: str, new: str) -> None:
    """Warn the caller of the deprecated ``old`` (a method that still works) to use ``new``."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)
