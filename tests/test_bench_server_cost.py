"""The server-cost benchmark stays runnable: its quick mode prints a row for each mix and
shape and each read size, every figure a positive number (the figures themselves move with
the machine; docs/benchmarks.md records a full run's)."""

from __future__ import annotations

import re

import pytest
from bench_runs import run_bench


@pytest.mark.real_redis
def test_quick_server_cost_benchmark_prints_every_row() -> None:
    printed = run_bench("bench_server_cost.py", "--quick", timeout=300)
    rows = re.findall(r"^\| (chat|tool-heavy) \| (turn|message) \|(.*)\|$", printed, re.M)
    assert [(mix, shape) for mix, shape, _ in rows] == [
        ("chat", "turn"),
        ("chat", "message"),
        ("tool-heavy", "turn"),
        ("tool-heavy", "message"),
    ]
    for _, _, cells in rows:
        figures = [float(cell.strip().rstrip("x")) for cell in cells.split("|")]
        assert len(figures) == 9
        assert all(figure > 0 for figure in figures)
    reads = re.findall(
        r"^\| ([\w-]+), (\d+) messages \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \|$", printed, re.M
    )
    assert [(mix, size) for mix, size, *_ in reads] == [
        ("chat", "100"),
        ("chat", "300"),
        ("tool-heavy", "100"),
    ]
