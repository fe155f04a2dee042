"""The README stays true: its example runs and CI runs exactly its test command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def bash_blocks() -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", README, re.DOTALL)]


def test_readme_opens_with_the_demo_and_test_commands() -> None:
    """The first two commands install and run the demo, then install and run the tests."""
    demo, tests = bash_blocks()[:2]
    assert demo.endswith("redis-history demo")
    assert "pytest" in tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """.ci/run's last command is the README's test command, verbatim."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == bash_blocks()[1]


def test_ci_lints_and_type_checks_before_the_tests() -> None:
    """.ci/run runs ruff, ruff format and strict mypy on the package and the tests, before them."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    commands = [line.strip() for line in ci[:-1]]
    assert "python3 -m ruff check ." in commands
    assert "python3 -m ruff format --check ." in commands
    mypy = [c for c in commands if c.startswith("python3 -m mypy ")]
    assert mypy, "mypy runs"
    assert {"redis_history", "tests"} <= set(mypy[0].split()[3:])


@pytest.mark.real_redis
def test_usage_example_runs(real_redis: redis.Redis) -> None:
    """The README's Python examples run as written, one after another, against a real Redis."""
    examples = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    assert len(examples) >= 2
    port = real_redis.connection_pool.connection_kwargs["port"]
    namespace: dict[str, object] = {}
    for example in examples:
        local = example.replace("redis.asyncio.Redis()", f"redis.asyncio.Redis(port={port})")
        exec(local.replace("redis.Redis()", f"redis.Redis(port={port})"), namespace)
    assert real_redis.llen("rh:tenant-a:{conv-1}:archive") == 5  # the first turn, whole
