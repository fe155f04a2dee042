"""The compaction benchmark stays runnable: a quick run drives real workers end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_runs import run_bench

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]


def test_quick_compaction_benchmark_compacts_every_conversation_in_both_modes(
    tmp_path: Path,
) -> None:
    """``bench_compaction.py --quick`` times every round and drains every queued conversation."""
    out_json = tmp_path / "compaction.json"
    out = run_bench(
        "bench_compaction.py", "--quick", "--markdown", "--json", str(out_json), timeout=240
    )
    assert "| forking (default) |" in out
    assert "| `--no-fork` |" in out
    report = json.loads(out_json.read_text())
    assert set(report["versions"]) >= {"python", "redis-py", "rq", "redis-server", "nproc"}
    assert [r["mode"] for r in report["results"]] == ["fork", "no-fork"]
    for result in report["results"]:
        assert len(result["rounds"]) == report["rounds"]
        for r in result["rounds"]:
            assert r["dropped"] > 0
            assert r["tokens"] >= 60_000  # past the default policy's soft limit
            assert r["writeback_ms"] > 0
        assert result["throughput_completed"] == result["throughput_conversations"] > 1
        assert result["compactions_per_second"] > 0
        assert result["median_ms"] <= result["p90_ms"] <= result["p99_ms"]
