"""The soak benchmark stays runnable: a quick run of real pods and workers loses nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_runs import run_bench

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]


def test_quick_soak_compacts_both_modes_and_loses_no_acknowledged_message(
    tmp_path: Path,
) -> None:
    """``bench_soak.py --quick`` runs pods and workers in both modes, samples rows, and finds
    every acknowledged message in its conversation's transcript once, in order, no job
    failed."""
    out_json = tmp_path / "soak.json"
    out = run_bench("bench_soak.py", "--quick", "--markdown", "--json", str(out_json), timeout=240)
    assert out.count("nothing lost") == 2
    assert "| raw | live mean |" in out
    assert "| manager | live mean |" in out
    report = json.loads(out_json.read_text())
    assert [r["mode"] for r in report["results"]] == ["raw", "manager"]
    for result in report["results"]:
        check = result["check"]
        assert check["ok"], check["problems"]
        assert check["acknowledged"] > 0
        assert check["lost"] == check["duplicated"] == check["out_of_order"] == 0
        assert check["failed_jobs"] == 0
        assert check["outcomes"].get("compacted", 0) > 0
        assert result["rows"]
        assert result["final"]["compactions"] > 0
    manager = report["results"][1]
    assert any(row["prepare_p50_ms"] is not None for row in manager["rows"])
