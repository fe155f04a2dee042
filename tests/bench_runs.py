"""Running a benchmark script the way a user does, for the tests that check it end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
