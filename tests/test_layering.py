"""Imports point one way: only ``redis_history.compaction.jobs`` (and ``worker/``) need RQ."""

from __future__ import annotations

import ast
import graphlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import redis_history

RQ_MODULES = {"redis_history.compaction.jobs"}
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
    """With rq made unimportable, every module except redis_history.compaction.jobs imports: the
    store, compaction, the demo and the command line know no RQ until a worker is asked for."""
    modules = [m for m in package_modules() if m not in RQ_MODULES | SCRIPTS]
    assert "redis_history.demo.run" in modules
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
    """The same probe fails for redis_history.compaction.jobs, so the test above can fail."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "redis_history.compaction.jobs"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "rq is unimportable" in done.stderr


CONTEXT = "redis_history.context"
ABOVE_CONTEXT = {
    "redis_history",
    "redis_history.cli",
    "redis_history.demo.run",
    "redis_history.__main__",
}
"""The public surface and the command line sit on top and may use the context layer."""


def imported_modules(module: str) -> set[str]:
    """Every module ``module``'s source imports, at the top or inside a function."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            assert node.level == 0, f"{module}: relative import"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_store_never_imports_the_context_layer() -> None:
    """The context layer (formats, turns, budgets) imports the store; no module below it
    imports redis_history.context, not even lazily inside a function."""
    below = [
        m
        for m in package_modules()
        if m != CONTEXT
        and not m.startswith(CONTEXT + ".")
        and m not in ABOVE_CONTEXT
        and not m.startswith(INTEGRATIONS)
    ]
    assert "redis_history.store.history" in below
    assert "redis_history.testing" in below
    offenders = {
        module: sorted(
            n for n in imported_modules(module) if n.split(".")[:2] == CONTEXT.split(".")
        )
        for module in below
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_context_layer_is_seen_by_the_import_check() -> None:
    """The check above would see an import of the context layer: the context package's own
    modules import each other."""
    assert any(n.startswith(CONTEXT) for n in imported_modules(CONTEXT))


INTEGRATIONS = "redis_history.integrations"
FRAMEWORKS = ("agents", "langchain_core", "langchain")


def test_nothing_imports_the_framework_adapters_but_themselves() -> None:
    """The adapters sit on top: no other module of the package imports them, and only they
    import a framework, not even lazily inside a function."""
    others = [m for m in package_modules() if not m.startswith(INTEGRATIONS)]
    assert "redis_history.store.history" in others
    offenders = {
        module: sorted(
            n
            for n in imported_modules(module)
            if n.startswith(INTEGRATIONS) or n.split(".")[0] in FRAMEWORKS
        )
        for module in others
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_package_imports_without_the_frameworks() -> None:
    """With the Agents SDK and LangChain made unimportable, ``redis_history``, its context
    layer and the Agents SDK session (a structural ``Session``: the SDK's types are for the
    type checker only) still import; the LangChain adapter says which extra it needs."""
    probe = PROBE.replace(
        'name == "rq" or name.startswith("rq.")', f"name.split('.')[0] in {FRAMEWORKS!r}"
    ).replace('"rq was imported"', '"a framework was imported"')
    probe = probe.replace(
        'any(m == "rq" or m.startswith("rq.") for m in sys.modules)',
        f"any(m.split('.')[0] in {FRAMEWORKS!r} for m in sys.modules)",
    )
    modules = ["redis_history", CONTEXT, f"{INTEGRATIONS}.openai_agents"]
    done = subprocess.run(
        [sys.executable, "-c", probe, *modules], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok {len(modules)}"
    langchain = subprocess.run(
        [sys.executable, "-c", probe, f"{INTEGRATIONS}.langchain"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert langchain.returncode != 0  # the probe does block a framework
    assert "needs langchain-core: pip install 'redis-history[langchain]'" in langchain.stderr


SHARED = "shared"
LAYERS: dict[str, set[str]] = {
    SHARED: {SHARED},
    "wire": {SHARED},
    "store": {SHARED, "wire"},
    "settings": {SHARED, "wire", "store"},
    "compaction": {SHARED, "wire", "store", "settings", "memory"},
    "memory": {SHARED, "wire", "store", "settings"},
    "context": {SHARED, "wire", "store", "compaction", "memory"},
    "integrations": {SHARED, "wire", "store", "context"},
    "testing": {SHARED, "wire", "store"},
    "root": {SHARED, "wire", "store", "compaction"},
    "demo": {SHARED, "wire", "store", "compaction", "root", "settings"},
    "admin": {SHARED, "wire", "store", "compaction", "settings", "memory"},
    "cli": {
        SHARED,
        "wire",
        "store",
        "compaction",
        "demo",
        "root",
        "admin",
        "context",
        "settings",
    },
}
"""Which folders each folder of the package may import: the layers of the README's layout.

``wire`` is the Redis plumbing every feature shares, below the store.

The compaction state machine and policy, which the store keeps and checks, are shared
vocabulary (``compaction_state``, ``compaction_policy``); ``compaction`` runs on top of the
store. ``settings`` (the deployment's variables, which name the tenants' key prefix and
compaction policy) sits on the store: the store itself never reads the environment."""


def layer(module: str) -> str:
    """The layer a package module belongs to."""
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    folders = {"wire", "store", "compaction", "context", "memory", "integrations", "demo", "admin"}
    if parts[1] in folders:
        return parts[1]
    if parts[1] in {"cli", "__main__"}:
        return "cli"
    if parts[1] == "testing":
        return "testing"
    if parts[1] == "settings":
        return "settings"
    return SHARED


def package_imports(module: str) -> set[str]:
    """The package modules ``module`` imports: ``from a import b`` counts as ``a.b`` when that
    is a module, else as ``a`` (so a public name taken from the root counts as the root)."""
    modules = set(package_modules()) | {"redis_history"}
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in modules
                else node.module
                for alias in node.names
            ]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def test_each_folder_imports_only_the_layers_below_it() -> None:
    """The tree shows the architecture: the shared vocabulary imports nothing above it, the
    store nothing of compaction but its rules, compaction and memory sit on the store, the
    context layer on those, the operator's commands beside it, the adapters and the command
    line on top; nothing a pod imports reaches the demo."""
    offenders: dict[str, list[str]] = {}
    for module in package_modules():
        allowed = LAYERS[layer(module)] | {layer(module)}
        bad = sorted(name for name in package_imports(module) if layer(name) not in allowed)
        if bad:
            offenders[module] = bad
    assert offenders == {}


def test_the_layer_check_sees_an_upward_import() -> None:
    """The check above can fail: the store's histories are imported by the compaction run,
    which the store may not import, and the demo imports the store."""
    assert "redis_history.store.history" in package_imports("redis_history.compaction.run")
    assert "compaction" not in LAYERS["store"]
    assert layer("redis_history.compaction.run") == "compaction"
    assert layer("redis_history.compaction_state") == SHARED
    assert "redis_history.demo.server" in package_imports("redis_history.demo.run")
    assert "demo" not in LAYERS["root"]


CORE = "redis_history.store.core"
IO_MODULES = {"asyncio", "logging", "os", "random", "secrets", "socket", "time"}
"""What sends, reads a clock or randomness, or logs: the front ends' business, not the core's."""


def test_the_store_core_does_no_io() -> None:
    """The core both histories share neither sends (no lane) nor reads the clock or random
    bytes nor logs: the front ends hand it those."""
    imported = imported_modules(CORE)
    assert imported & {*IO_MODULES, "redis_history.wire.lane"} == set()
    assert "os" in imported_modules("redis_history.wire.lane")  # the check can fail


def test_no_import_runs_in_a_circle() -> None:
    """The package's modules (the root among them, and imports made for the type checker
    alone) import one another without a circle: each could be read before what imports it."""
    modules = [*package_modules(), "redis_history"]
    graph = {module: package_imports(module) - {module} for module in modules}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"imports in a circle: {' -> '.join(exc.args[1])}")
    assert order[0] != "redis_history"


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("redis_history.compaction.policy", "redis_history.compaction_policy", "CompactionPolicy"),
        ("redis_history.compaction.policy", "redis_history.compaction_policy", "CompactionContext"),
        ("redis_history.compaction.state", "redis_history.compaction_state", "CompactionState"),
        ("redis_history.store.scripts", "redis_history.wire.scripts", "script"),
    ],
)
def test_a_moved_modules_old_path_still_gives_each_name_with_a_warning(
    old: str, new: str, name: str
) -> None:
    """Code that imports the compaction rules or the scripts from where they lived keeps
    working, told where they went; a name they never had is still an AttributeError."""
    module, moved = importlib.import_module(old), importlib.import_module(new)
    with pytest.warns(DeprecationWarning, match=f"moved to {new}.{name}"):
        assert getattr(module, name) is getattr(moved, name)
    with pytest.raises(AttributeError):
        module.Nothing  # noqa: B018


def folder_of(module: str) -> str:
    """The package folder a module sits in (a package is its own folder)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    return module if spec.submodule_search_locations is not None else module.rpartition(".")[0]


def private_of_another_folder(module: str, name: str) -> bool:
    """Whether ``name`` (``a.b._c`` or ``a.b._c.d``: a module or a name) is private to a
    folder other than ``module``'s."""
    parts = name.split(".")
    private = next(
        (i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None
    )
    if private is None:
        return False
    owner = ".".join(parts[:private])
    try:
        is_module = importlib.util.find_spec(".".join(parts[: private + 1])) is not None
    except ModuleNotFoundError:  # a name of a module that is no package
        is_module = False
    home = owner if is_module else folder_of(owner)
    return home != folder_of(module)


def test_no_folder_imports_another_folders_private_modules_or_names() -> None:
    """Each folder reaches another only through its public names: no module imports a
    ``_``-prefixed module or name that lives in another folder."""
    offenders = {
        module: sorted(
            n
            for n in imported_modules(module)
            if n.startswith("redis_history.") and private_of_another_folder(module, n)
        )
        for module in [*package_modules(), "redis_history"]
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_private_import_check_can_fail() -> None:
    """The check above sees a private module of another folder, and a private name of one,
    and lets a folder use its own."""
    assert private_of_another_folder("redis_history.admin.dump", "redis_history.store._stored")
    assert private_of_another_folder("redis_history.cli", "redis_history.store.core._fence")
    assert not private_of_another_folder(
        "redis_history.store.history", "redis_history.store._pages"
    )
