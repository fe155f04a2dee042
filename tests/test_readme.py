"""The README stays a front page: short, opening with the two commands CI runs, linking into
docs/ (tests/test_docs.py runs its quickstart with the rest of the examples)."""

from __future__ import annotations

import re
from pathlib import Path

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


def test_readme_is_a_front_page_that_links_every_page_of_the_docs() -> None:
    """At most 250 lines, and every page of docs/ is one link away."""
    assert len(README.splitlines()) <= 250
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", README))
    assert linked == {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
