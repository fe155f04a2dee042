"""The ``redis-history`` command line run as a subprocess or in this process, and a Redis that
needs a password."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_history.cli import main
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


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``redis-history <args>`` run by :func:`redis_history.cli.main` in this process, with
    the environment, input and captured output :func:`run_cli` gives a child: the same
    command without a Python start-up each time. (The entry point itself, and the commands
    that start processes, ``worker`` and ``demo``, go through :func:`run_cli`.)"""
    out, err = io.BytesIO(), io.BytesIO()
    streams = {
        "stdin": io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8"),
        "stdout": io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        "stderr": io.TextIOWrapper(err, encoding="utf-8", write_through=True),
    }
    saved = {name: getattr(sys, name) for name in streams}
    with _environment(clean_env() if env is None else env):
        for name, stream in streams.items():
            setattr(sys, name, stream)
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            for name, stream in saved.items():
                setattr(sys, name, stream)
    return subprocess.CompletedProcess(
        ["redis-history", *args], code, out.getvalue().decode(), err.getvalue().decode()
    )


@pytest.fixture(scope="session")
def guarded() -> Iterator[RedisServer]:
    """A redis-server whose default user needs ``SECRET``."""
    with RedisServer() as server:
        server.client().config_set("requirepass", SECRET)
        yield server
