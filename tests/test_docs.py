"""The README and docs/ stay true: every Python example runs alone, every link and every named
file exists."""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from redis_history.cli import EXIT_STATUSES
from redis_history.compaction.jobs import configure_worker

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
"""The pages whose examples the tests run."""
PAGES = [*DOCS, ROOT / "CHANGELOG.md", ROOT / "benchmarks" / "README.md"]
"""Every page of prose: their links and the files they name are checked."""
SOURCES = sorted(
    path
    for tree in ("redis_history", "worker", "benchmarks", "lua")
    for path in (ROOT / tree).rglob("*")
    if path.suffix in {".py", ".lua"} and "__pycache__" not in path.parts
)
"""The code whose docstrings and comments may name a script."""

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
LUA_PATH = re.compile(r"\blua/(?:includes/)?[\w-]+\.lua\b")
LUA_NAME = re.compile(r"`(?P<name>[\w-]+\.lua)`")
REPO_PATH = re.compile(r"`(?P<path>(?:tests|benchmarks|worker)/[\w/-]+\.py)(?:::(?P<test>\w+))?`")
CLIENT = re.compile(r"\b(redis\.(?:asyncio\.)?Redis)\((\))?")
"""A client constructed in an example: pointed at the test server."""
LOCAL_REDIS = re.compile(r"\b(?:Redis|RedisCluster|StrictRedis)\((?!port=)|localhost|6379")
"""What would reach a Redis other than the test server's."""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    """The line of the block's first line of code (1-based)."""
    lang: str
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, dedented by their fence's indentation."""
    found: list[Block] = []
    opened: tuple[str, str, int] | None = None
    lines: list[str] = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        fence = FENCE.match(line)
        if opened is None:
            if fence:
                opened, lines = (fence["indent"], fence["lang"], number + 1), []
        elif fence and fence["indent"] == opened[0] and not fence["lang"]:
            indent, lang, start = opened
            code = "\n".join(text.removeprefix(indent) for text in lines) + "\n"
            found.append(Block(page, start, lang, code))
            opened = None
        else:
            lines.append(line)
    assert opened is None, f"{page.name}: a code block opened on line {opened[2] - 1} never closes"
    return found


def prose(page: Path) -> str:
    """``page`` without its code blocks (links and headings live outside them)."""
    text = page.read_text(encoding="utf-8")
    return re.sub(r"^\s*```.*?^\s*```\s*$", "", text, flags=re.DOTALL | re.MULTILINE)


PYTHON = [block for page in DOCS for block in blocks(page) if block.lang == "python"]


def localised(block: Block, url: str) -> str:
    """The block's code on the test server: ``redis.Redis(...)``, ``redis.asyncio.Redis(...)``
    and ``redis://localhost:6379/0`` (the examples' local Redis) name the server this test
    session started instead."""
    port = urlsplit(url).port
    code = CLIENT.sub(lambda m: f"{m[1]}(port={port}{')' if m[2] else ', '}", block.code)
    code = code.replace("redis://localhost:6379/0", url)
    stray = LOCAL_REDIS.search(code)
    assert stray is None, (
        f"{block}: reach Redis through redis.Redis(...), redis.asyncio.Redis(...) or "
        f"redis://localhost:6379/0 only, so the test can point it at its own server: {stray}"
    )
    return code


def test_the_docs_have_python_examples() -> None:
    """Each page of docs/ exists and the README's quickstart is Python the tests run."""
    names = {page.name for page in DOCS}
    for name in ("guide", "context", "integrations", "memory", "operations", "guarantees"):
        assert f"{name}.md" in names
    assert any(block.page.name == "README.md" for block in PYTHON)
    assert len(PYTHON) >= 10


@pytest.mark.real_redis
@pytest.mark.parametrize("block", PYTHON, ids=str)
def test_python_example_runs_alone(block: Block, real_redis: redis.Redis, redis_url: str) -> None:
    """Each Python example runs as written, alone in a fresh module, against a flushed real Redis
    (tracebacks name the page and its line)."""
    module = types.ModuleType("docs_example")
    module.__file__ = str(block.page)
    sys.modules[module.__name__] = module
    code = compile("\n" * (block.line - 1) + localised(block, redis_url), str(block), "exec")
    try:
        exec(code, module.__dict__)
    finally:
        del sys.modules[module.__name__]
        configure_worker(None)  # a worker run by an example leaves its settings behind


@pytest.mark.real_redis
def test_the_quickstart_runs_again_on_the_same_server(
    real_redis: redis.Redis, redis_url: str
) -> None:
    """The README's quickstart is run again and again: its second and third runs, on the Redis
    the first left behind (the conversation, its summaries, the queue), pass as the first."""
    [quickstart] = [block for block in PYTHON if block.page.name == "README.md"]
    code = compile(
        "\n" * (quickstart.line - 1) + localised(quickstart, redis_url), str(quickstart), "exec"
    )
    for _run in range(3):
        module = types.ModuleType("quickstart")
        try:
            exec(code, module.__dict__)
        finally:
            configure_worker(None)
    assert real_redis.exists("rh:tenant-a:{conv-1}:summaries")


def test_examples_are_python_or_shell() -> None:
    """Every code block says what it holds; shell commands are ``bash``, never run as Python."""
    for page in PAGES:
        for block in blocks(page):
            assert block.lang in {"python", "bash", "text", "json"}, f"{block}: {block.lang!r}"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of ``page``."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", prose(page), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def test_every_relative_link_points_at_a_file_and_heading_that_exist() -> None:
    """A relative link in a page names an existing file, and a heading of it when it has a
    ``#fragment`` (GitHub's anchors)."""
    broken = []
    for page in PAGES:
        for match in LINK.finditer(prose(page)):
            target = match["target"]
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not ours to check
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


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


def test_every_lua_name_placed_in_a_script_is_defined_there() -> None:
    """A docstring or page that says ```name`` in ``lua/...``` names a function, local or
    constant that file defines."""
    placed = re.compile(r"``?(?P<name>\w+)``?\s+in\s+``?(?P<path>lua/[\w/-]+\.lua)")
    wrong = [
        f"{path.relative_to(ROOT)}: {m['name']} in {m['path']}"
        for path in [*PAGES, *SOURCES]
        for m in placed.finditer(path.read_text(encoding="utf-8"))
        if (ROOT / m["path"]).is_file()
        and not re.search(
            rf"(?:function|local)\s+(?:\w+\s*,\s*)*{m['name']}\b",
            (ROOT / m["path"]).read_text(encoding="utf-8"),
        )
    ]
    assert not wrong, wrong


def test_every_test_and_benchmark_a_page_names_exists() -> None:
    """The tests the pages cite as proof, and the benchmarks they cite, exist (and the test
    function, when one is named)."""
    missing = []
    for page in PAGES:
        for match in REPO_PATH.finditer(page.read_text(encoding="utf-8")):
            path = ROOT / match["path"]
            if not path.is_file():
                missing.append(f"{page.relative_to(ROOT)}: {match['path']}")
            elif match["test"] and f"def {match['test']}(" not in path.read_text("utf-8"):
                missing.append(f"{page.relative_to(ROOT)}: {match[0]}")
    assert not missing, missing


def test_no_page_or_comment_speaks_of_how_the_work_was_organised() -> None:
    """Pages and code speak of the project: no numbered issues or sessions of work."""
    numbered = r"\b(?:issue|session)s?\s*#?\d+"
    pattern = re.compile(rf"(?i){numbered}|\b(?:this|earlier|other) sessions?\b(?! object)")
    files = [*PAGES, *SOURCES, *sorted((ROOT / "tests").glob("*.py"))]
    found = [
        f"{path.relative_to(ROOT)}: {match[0]}"
        for path in files
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_the_exit_statuses_on_the_operations_page_are_the_cli_s() -> None:
    """docs/operations.md lists every exit status ``redis-history --help`` does, meaning the
    same."""
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", page, re.MULTILINE))
    statuses = {"0": "done", **{str(status): text for _, status, text in EXIT_STATUSES}}
    assert rows == statuses
