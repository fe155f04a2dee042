"""The library leaves the process's garbage collector to the process: it never drives it.

The collector is process-wide state another thread (or the application) may own, so no
module of the package disables, enables, freezes or runs it. The one exception is RQ's
work horse (``CompactionWorker.main_work_horse``): a child the worker forks for a single
job, in which ``gc.freeze`` keeps the collector off the objects the horse inherited.
"""

from __future__ import annotations

import ast
from pathlib import Path

import redis_history

DRIVING = frozenset({"collect", "disable", "enable", "freeze", "set_threshold", "unfreeze"})
"""The ``gc`` functions that change what the collector does, for the whole process."""

ALLOWED = {("compaction/jobs.py", "CompactionWorker.main_work_horse", "gc.freeze")}
"""Where a call is allowed: (file in the package, enclosing class.function, call)."""


class _Calls(ast.NodeVisitor):
    """The ``gc`` calls of one module, by the class and function they are in."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        """Names bound to the ``gc`` module (``import gc``, ``import gc as g``)."""
        self.functions: dict[str, str] = {}
        """Names bound to one of its functions (``from gc import freeze as f``)."""
        self.scope: list[str] = []
        self.found: set[tuple[str, str]] = set()

    def visit_Import(self, node: ast.Import) -> None:
        self.modules.update(a.asname or a.name for a in node.names if a.name == "gc")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "gc":
            self.functions.update((a.asname or a.name, a.name) for a in node.names)

    def _scoped(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in self.modules:
                name = func.attr
        elif isinstance(func, ast.Name):
            name = self.functions.get(func.id)
        if name in DRIVING:
            self.found.add((".".join(self.scope) or "<module>", f"gc.{name}"))
        self.generic_visit(node)


def gc_calls(source: str) -> set[tuple[str, str]]:
    """(enclosing class.function, ``gc.<function>``) of every call driving the collector."""
    calls = _Calls()
    calls.visit(ast.parse(source))
    return calls.found


def test_no_module_of_the_package_drives_the_collector() -> None:
    """No module disables, enables, freezes, collects or re-tunes the garbage collector,
    but RQ's work horse, which freezes what it inherited from the worker."""
    root = Path(redis_history.__file__).parent
    found = {
        (path.relative_to(root).as_posix(), scope, call)
        for path in sorted(root.rglob("*.py"))
        for scope, call in gc_calls(path.read_text())
    }
    assert found - ALLOWED == set()


def test_the_scan_sees_every_way_of_calling_the_collector() -> None:
    """The scan finds the calls it is about however ``gc`` was imported, so the test above
    can fail; reading the collector's state is not driving it."""
    source = """
import gc
import gc as collector
from gc import freeze, collect as sweep

gc.disable()

class Reader:
    def read(self):
        collector.enable()
        if gc.isenabled():
            freeze()

async def later():
    sweep(2)
    gc.get_count()
"""
    assert gc_calls(source) == {
        ("<module>", "gc.disable"),
        ("Reader.read", "gc.enable"),
        ("Reader.read", "gc.freeze"),
        ("later", "gc.collect"),
    }
