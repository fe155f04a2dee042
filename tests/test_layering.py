"""Imports point one way: only ``redis_history.jobs`` (and ``worker/``) need RQ."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

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
