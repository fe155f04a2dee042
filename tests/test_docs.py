"""The docs and docstrings stay true: every script they name exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
"""Every page of prose."""
SOURCES = sorted(
    path
    for tree in ("redis_history", "worker", "benchmarks", "lua")
    for path in (ROOT / tree).rglob("*")
    if path.suffix in {".py", ".lua"} and "__pycache__" not in path.parts
)
"""The code whose docstrings and comments may name a script."""

LUA_PATH = re.compile(r"\blua/(?:includes/)?[\w-]+\.lua\b")
LUA_NAME = re.compile(r"`(?P<name>[\w-]+\.lua)`")


def test_every_script_named_in_docs_or_code_exists() -> None:
    """Every ``lua/...`` path, and every script named on its own, in a page, a docstring or a
    comment is a file of ``lua/`` or ``lua/includes/``."""
    scripts = {path.name for path in (ROOT / "lua").rglob("*.lua")}
    missing = []
    for path in [*PAGES, *SOURCES]:
        text = path.read_text(encoding="utf-8")
        missing += [
            f"{path.relative_to(ROOT)}: {named}"
            for named in LUA_PATH.findall(text)
            if not (ROOT / named).is_file()
        ]
        missing += [
            f"{path.relative_to(ROOT)}: {m['name']}"
            for m in LUA_NAME.finditer(text)
            if m["name"] not in scripts
        ]
    assert not missing, missing
