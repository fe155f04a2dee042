"""The memory benchmark stays runnable, and its quality table is the labelled set's (no
timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "bench_memory.py"


@pytest.mark.real_redis
def test_quick_memory_benchmark_runs_and_bm25_beats_newest_first(tmp_path: Path) -> None:
    """``bench_memory.py --quick`` fills 1,000 memories, times recalls against both floors,
    and reports BM25's recall@3 above newest-first's on the labelled set."""
    out = tmp_path / "memory.json"
    printed = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_memory.py"),
            "--quick",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "| 1,000 |" in printed
    result = json.loads(out.read_text())
    (row,) = result["latency"]
    assert row["stored"] == 1000
    assert {"recall", "raw reads", "round trip"} <= set(row)
    quality = result["quality"]
    assert quality["bm25"]["3"] > quality["newest first"]["3"]
