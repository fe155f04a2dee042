"""The recall benchmark stays runnable and prints what the docs quote: its quality figures
are deterministic (fixed sets, a static embedder), its timings are only printed."""

from __future__ import annotations

import pytest
from bench_runs import run_bench


@pytest.mark.real_redis
def test_quick_recall_benchmark_prints_every_figure() -> None:
    printed = run_bench("bench_recall.py", "--quick", timeout=300)
    assert (
        "| labelled (60 memories, 28 questions) | 0.75 | 0.93 | 0.93 | 0.71 | 1.00 | yes |"
        in printed
    )
    assert (
        "| paraphrases (24, 24: no word in common) | 0.00 | 0.00 | 0.00 | 0.71 | 0.79 | yes |"
        in printed
    )
    assert "30 of two: precision 0.96, recall 0.87." not in printed
    assert "45 of two: precision 0.96, recall 0.87." in printed
    assert "30 of one fact: precision 1.00, recall 1.00." in printed
    assert printed.count("a recall in an owner of 500 memories") == 2
