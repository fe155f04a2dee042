"""The throwaway redis-server launcher picks the newest server it can run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from redis_history.server import find_redis_server


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
