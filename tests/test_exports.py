"""The public surface: ``__all__`` is exactly what the package's top level defines or re-exports,
sorted, and every module's ``__all__`` names exist in it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import redis_history
from redis_history import errors

INIT = Path(redis_history.__file__)


def top_level_bindings(module: ast.Module) -> dict[str, str | None]:
    """Each name the module's top level binds, with the module it is imported from (None if
    defined there). Any other kind of statement fails, so that no name escapes the parse."""
    bound: dict[str, str | None] = {}
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            bound.update({alias.asname or alias.name: node.module for alias in node.names})
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.partition(".")[0]] = alias.name
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound[node.name] = None
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [name for target in targets for name in ast.walk(target)]
            bound.update({name.id: None for name in names if isinstance(name, ast.Name)})
        elif not isinstance(node, ast.Expr | ast.ImportFrom):  # docstring, __future__
            raise AssertionError(f"line {node.lineno}: teach this test {type(node).__name__}")
    return bound


def public_top_level() -> dict[str, str | None]:
    """The public (non-underscore) names ``__init__.py`` binds, with where each comes from."""
    bound = top_level_bindings(ast.parse(INIT.read_text()))
    return {name: module for name, module in bound.items() if not name.startswith("_")}


def package_modules() -> list[ModuleType]:
    """Every module of the package but ``__main__`` (which runs the command line)."""
    names = [
        info.name
        for info in pkgutil.walk_packages(redis_history.__path__, "redis_history.")
        if not info.name.endswith(".__main__")
    ]
    return [redis_history, *(importlib.import_module(name) for name in names)]


def test_all_is_sorted_and_complete() -> None:
    """__all__ is sorted, unique, and every name in it is importable."""
    assert redis_history.__all__ == sorted(set(redis_history.__all__))
    for name in redis_history.__all__:
        assert getattr(redis_history, name) is not None


def test_all_is_exactly_the_public_names_of_the_top_level() -> None:
    """Every public name ``__init__.py`` defines or re-exports is in ``__all__``, and only those."""
    public = public_top_level()
    assert public, "the parse found the top level's names"
    missing = sorted(set(public) - set(redis_history.__all__))
    extra = sorted(set(redis_history.__all__) - set(public))
    assert (missing, extra) == ([], [])


def test_the_top_level_re_exports_only_what_its_modules_declare_public() -> None:
    """A name imported into the top level is in the ``__all__`` of the module it comes from."""
    for name, source in public_top_level().items():
        if source is not None:
            assert name in importlib.import_module(source).__all__, f"{source}.{name}"


@pytest.mark.parametrize("module", package_modules(), ids=lambda module: module.__name__)
def test_every_name_in_a_module_all_exists(module: ModuleType) -> None:
    """Each module's ``__all__`` (where it has one) is unique and names only what it holds."""
    exported = getattr(module, "__all__", [])
    assert len(exported) == len(set(exported))
    assert [name for name in exported if not hasattr(module, name)] == []


def test_every_error_in_the_tree_is_exported_and_a_history_error() -> None:
    """Each exception in redis_history.errors is public and one ``except HistoryError`` away."""
    for name in errors.__all__:
        assert name in redis_history.__all__
        assert issubclass(getattr(errors, name), errors.HistoryError)
