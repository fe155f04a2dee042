"""The benchmark scripts for the tests: run the way a user runs them, or loaded as modules."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def run_bench(script: str, *args: str, timeout: float = 120) -> str:
    """What ``python benchmarks/<script> <args>`` prints, run from the repository root; a
    failing run raises ``CalledProcessError``."""
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    ).stdout


def load_bench(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` (not a package) as a module, registered so that its
    dataclasses work."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
