"""Imports point one way: only ``redis_history.jobs`` (and ``worker/``) need RQ, and the store
never imports the context layer built on it."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import redis_history

RQ_MODULES = {"redis_history.jobs"}
SCRIPTS = {"redis_history.__main__"}
"""Running, not importing, is what ``python -m redis_history`` does; cli covers its imports."""

PROBE = """
import importlib, sys

class NoRQ:
    def find_spec(self, name, path=None, target=None):
        if name == "rq" or name.startswith("rq."):
            raise ImportError(f"rq is unimportable in this test: {name}")
        return None

sys.meta_path.insert(0, NoRQ())
for name in sys.argv[1:]:
    importlib.import_module(name)
assert not any(m == "rq" or m.startswith("rq.") for m in sys.modules), "rq was imported"
print("ok", len(sys.argv) - 1)
"""


def package_modules() -> list[str]:
    """Every module of the package, subpackages included."""
    prefix = redis_history.__name__ + "."
    return sorted(info.name for info in pkgutil.walk_packages(redis_history.__path__, prefix))


def test_every_module_but_jobs_imports_without_rq() -> None:
    """With rq made unimportable, every module except redis_history.jobs imports: the store,
    compaction, the demo and the command line know no RQ until a worker is asked for."""
    modules = [m for m in package_modules() if m not in RQ_MODULES | SCRIPTS]
    assert "redis_history.demo" in modules
    assert "redis_history.cli" in modules
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "redis_history", *modules],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok {len(modules) + 1}"


def test_the_probe_would_see_rq() -> None:
    """The same probe fails for redis_history.jobs, so the test above can fail."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "redis_history.jobs"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "rq is unimportable" in done.stderr


CONTEXT = "redis_history.context"
ABOVE_THE_STORE = {
    "redis_history",  # re-exports the public names of every layer
    "redis_history.__main__",
    "redis_history.cli",
    "redis_history.compaction",
    "redis_history.demo",
    "redis_history.jobs",
}
"""What may import the context layer when it loads: it, and what sits beside or above it."""
CALL_TIME = {
    ("redis_history._core", "redis_history.context.turns"),
    ("redis_history.testing", "redis_history.context.turns"),
}
"""The store's one read in the context layer's shape, ``turns()``, imports grouping when called."""


def context_imports(path: Path) -> list[tuple[str, str]]:
    """Each import of the context layer in a file, as (when it runs, module): ``load`` at
    import, ``call`` inside a function; those under ``if TYPE_CHECKING`` never run."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, when: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                for orelse in child.orelse:
                    visit(orelse, when)
                continue
            if isinstance(child, ast.Import):
                found.extend((when, a.name) for a in child.names if a.name.startswith(CONTEXT))
            elif isinstance(child, ast.ImportFrom) and child.module:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
                found.extend([(when, name) for name in names if name.startswith(CONTEXT)][:1])
            inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, "call" if inner else when)

    visit(ast.parse(path.read_text()), "load")
    return found


def module_files() -> dict[str, Path]:
    """Every module of the package by name, with its source file."""
    root = Path(redis_history.__file__).parent
    files = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join((redis_history.__name__, *parts)).removesuffix(".__init__")
        files[name] = path
    return files


def test_the_store_does_not_import_the_context_layer() -> None:
    """The context layer imports the store, never the reverse: no module below it imports it
    when loading, and the only call-time import is ``turns()`` reaching the grouping module."""
    files = module_files()
    assert f"{CONTEXT}.turns" in files
    assert "redis_history._core" in files
    wrong = []
    for name, path in sorted(files.items()):
        if name == CONTEXT or name.startswith(CONTEXT + ".") or name in ABOVE_THE_STORE:
            continue
        for when, target in context_imports(path):
            if when == "load" or (name, target) not in CALL_TIME:
                wrong.append(f"{name} imports {target} at {when} time")
    assert wrong == []


def test_the_context_rule_would_see_an_import(tmp_path: Path) -> None:
    """The parse finds a load-time, a call-time and a type-only import for what they are."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from redis_history.context import group_turns\n"
        "import redis_history.context.formats\n"
        "if TYPE_CHECKING:\n"
        "    from redis_history.context.turns import Turn\n"
        "def f():\n"
        "    from redis_history.context.turns import group_entries\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert context_imports(path) == [
        ("load", "redis_history.context"),
        ("load", "redis_history.context.formats"),
        ("call", "redis_history.context.turns"),
    ]
