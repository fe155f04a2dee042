"""The memory benchmark stays runnable, and its quality table is the labelled set's (no
timing assertions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_runs import run_bench


@pytest.mark.real_redis
def test_quick_memory_benchmark_runs_and_bm25_beats_newest_first(tmp_path: Path) -> None:
    """``bench_memory.py --quick`` fills 1,000 memories, times recalls against both floors,
    and reports BM25's recall@3 above newest-first's on the labelled set."""
    out = tmp_path / "memory.json"
    printed = run_bench("bench_memory.py", "--quick", "--json", str(out))
    assert "| 1,000 |" in printed
    result = json.loads(out.read_text())
    (row,) = result["latency"]
    assert row["stored"] == 1000
    assert {"recall", "raw reads", "round trip"} <= set(row)
    quality = result["quality"]
    assert quality["bm25"]["3"] > quality["newest first"]["3"]
