"""The estimate benchmark stays runnable, and the default estimate stays within its
documented bound on the seeded traffic (deterministic accuracy, not timing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_runs import run_bench


@pytest.mark.real_redis
def test_quick_estimate_benchmark_meets_the_documented_bounds(tmp_path: Path) -> None:
    """``bench_estimate.py --quick`` prints every row; on the realistic mix, with the input
    tokens reported at every LLM call, the estimate stays within 3% of the exact prompt."""
    out = tmp_path / "estimate.json"
    printed = run_bench("bench_estimate.py", "--quick", "--json", str(out))
    result = json.loads(out.read_text())
    rows = {(r["mix"], r["label"]): r for r in result["errors"]}
    for mix in ("realistic", "coding", "short"):
        assert f"| {mix} | estimate, baseline every LLM call |" in printed
        exact = rows[mix, "exact `o200k_base`, no baseline"]
        assert exact["max"] == 0, "the exact counter is exact"
    every_call = rows["realistic", "estimate, baseline every LLM call"]
    assert every_call["standing_calls"] > 0
    assert every_call["standing_max"] <= 0.03
    assert rows["realistic", "estimate (default), no baseline"]["p95"] <= 0.05
    costs = {(r["mix"], r["counter"]): r for r in result["costs"]}
    assert abs(costs["realistic", "estimate"]["sum"]) <= 0.03
