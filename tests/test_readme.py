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


@pytest.mark.real_redis
def test_usage_example_runs(real_redis: redis.Redis) -> None:
    """The README's Python examples run as written, one after another, against a real Redis."""
    usage, compaction = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    port = real_redis.connection_pool.connection_kwargs["port"]
    namespace: dict[str, object] = {}
    for example in (usage, compaction):
        exec(example.replace("redis.Redis()", f"redis.Redis(port={port})"), namespace)
    assert real_redis.llen("rh:tenant-a:{conv-1}:archive") == 3
