"""The ``redis-history`` command line run as a subprocess, and a Redis that needs a password."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_history.demo.server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
SECRET = "Sup3r-s3cret-pw"
"""The password of the guarded server, and of every URL the tests must not leak."""


def url(port: int, password: str = SECRET) -> str:
    """A URL of the loopback Redis on ``port`` with ``password``."""
    return f"redis://:{password}@127.0.0.1:{port}/0"


def clean_env(**variables: str) -> dict[str, str]:
    """This process's environment without REDIS_HISTORY_*/RQ_* settings, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_HISTORY_", "RQ_"))}
    return {**env, **variables}


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    module: str = "redis_history",
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <args>`` from the repository's root, to its end (``stdin`` its
    input; none by default)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True, text=True, env=clean_env() if env is None else env, cwd=ROOT,
        timeout=120, check=False, input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="session")
def guarded() -> Iterator[RedisServer]:
    """A redis-server whose default user needs ``SECRET``."""
    with RedisServer() as server:
        server.client().config_set("requirepass", SECRET)
        yield server
