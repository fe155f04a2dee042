"""Print pip requirements pinning what pyproject.toml declares to its floors, for CI's floors run.

Each runtime dependency and each of the test extra, ``name[extras]>=X`` (with or
without a ceiling), becomes ``name[extras]==X``: installed with the package, they
give the oldest releases it claims to support, and the suite runs on those.
``LEFT_OUT`` names what the floors run does not pin, each with the reason; a
dependency without a ``>=`` floor, or with an environment marker, is an error.
tests/test_floors.py checks the output against pyproject.toml.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

LEFT_OUT = {
    "mypy": "a lint tool: CI runs it on the newest release only",
    "ruff": "a lint tool: CI runs it on the newest release only",
    "openai-agents": "every release for openai 3 needs pydantic 2.12 or later, above the "
    "package's floor; its adapter's tests run on the newest releases",
}
"""Dependencies of the test extra that the floors run leaves to the newest releases."""

REQUIREMENT = re.compile(r"^(?P<name>[\w.-]+)(?P<extras>\[[^\]]*\])?(?P<spec>.*)$")


def declared() -> list[str]:
    """The runtime dependencies, then the test extra, as pyproject.toml writes them."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["test"]]


def pin(requirement: str) -> tuple[str, str]:
    """``(name, "name[extras]==floor")`` for one requirement that has a ``>=`` floor."""
    match = REQUIREMENT.match(requirement.replace(" ", ""))
    if match is None or ";" in requirement:
        raise SystemExit(f"floors.py cannot read {requirement!r}")
    floors = [s[2:] for s in match["spec"].split(",") if s.startswith(">=")]
    if len(floors) != 1:
        raise SystemExit(f"{requirement!r} needs exactly one '>=' floor")
    return match["name"].lower(), f"{match['name']}{match['extras'] or ''}=={floors[0]}"


def main() -> None:
    """Print one pinned requirement per line, in pyproject.toml's order."""
    pinned: dict[str, str] = {}
    for requirement in declared():
        name, line = pin(requirement)
        if name in LEFT_OUT:
            continue
        if pinned.setdefault(name, line) != line:
            raise SystemExit(f"{name} is declared with two floors")
    sys.stdout.write("".join(f"{line}\n" for line in pinned.values()))


if __name__ == "__main__":
    main()
