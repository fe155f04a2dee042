"""The Lua scripts: each file is registered, packaged into the wheel, and headed by its contract."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import fakeredis
import pytest
import redis
import redis.asyncio

from redis_history import AsyncRedisHistory, Message, RedisHistory
from redis_history.limits import MAX_BATCH_MESSAGES
from redis_history.memory.redis_memory import MAX_MESSAGE_IDS
from redis_history.store.core import (
    APPENDS_DROPPED,
    OP_TOKEN_BYTES,
    OPS_KEPT,
    PARTLY_REMOVED,
    _call,
    span,
)
from redis_history.wire.scripts import (
    ERRORS,
    Refusal,
    expand_includes,
    script,
    script_names,
    script_source,
)

ROOT = Path(__file__).resolve().parent.parent
LUA_FILES = sorted(p.name for p in (ROOT / "lua").glob("*.lua"))


def test_every_script_file_is_a_script() -> None:
    """Each lua/<verb>-<NKEYS>.lua is one script, named by its verb, run by its SHA1."""
    assert sorted(script_names()) == sorted(f.rsplit("-", 1)[0] for f in LUA_FILES)
    for filename in LUA_FILES:
        lua = script(filename.rsplit("-", 1)[0])
        assert lua.nkeys == int(filename.removesuffix(".lua").rsplit("-", 1)[1])
        assert fakeredis.FakeRedis().script_load(lua.source) == lua.sha


@pytest.mark.parametrize("filename", LUA_FILES)
def test_scripts_declare_their_keys_and_never_build_keys(filename: str) -> None:
    """Headers list KEYS[1..N] as the file name says; no script calls KEYS or SCAN."""
    source = script_source(filename.rsplit("-", 1)[0])
    nkeys = int(filename.removesuffix(".lua").rsplit("-", 1)[1])
    declared = sorted({int(n) for n in re.findall(r"^KEYS\[(\d+)\]", source, re.MULTILINE)})
    assert declared == list(range(1, nkeys + 1))
    assert not re.search(r"^--- @include", source, re.MULTILINE)
    assert not re.search(r"'(KEYS|SCAN)'", source)


def test_a_call_with_the_wrong_key_count_is_refused_when_built() -> None:
    """Every script call is checked against the key count its file name declares."""
    for name in script_names():
        lua = script(name)
        with pytest.raises(AssertionError, match=f"{name} takes {lua.nkeys} keys"):
            _call(int, name, ("k",) * (lua.nkeys + 1), ())


def test_includes_resolve_nested_once_each_and_refuse_cycles() -> None:
    """An include may include others; each is expanded once, where first named; a cycle raises."""
    files = {
        "a": '--- @include "b"\na()\n',
        "b": '--- @include "c"\nb()\n',
        "c": "c()\n",
        "loop": '--- @include "back"\n',
        "back": '--- @include "loop"\n',
    }
    source = '--- @include "a"\n--- @include "c"\n--- @include "b"\nmain()\n'
    assert expand_includes(source, files.__getitem__) == "c()\nb()\na()\nmain()\n"
    with pytest.raises(ValueError, match="circular include: loop -> back -> loop"):
        expand_includes('--- @include "loop"\n', files.__getitem__)


def test_the_refusal_codes_are_the_ones_the_scripts_use() -> None:
    """lua/includes/codes.lua names the same codes, with the same numbers, as Refusal."""
    source = (ROOT / "lua" / "includes" / "codes.lua").read_text()
    (names, values) = re.search(r"^local ([A-Z_, ]+) = ([0-9, ]+)$", source, re.MULTILINE).groups()  # type: ignore[union-attr]
    in_lua = dict(zip(names.split(", "), map(int, values.split(", ")), strict=True))
    assert in_lua == {code.name: code.value for code in Refusal}
    assert set(ERRORS) == set(Refusal)


def test_the_records_are_laid_out_alike_in_python_and_lua() -> None:
    """lua/includes/ring.lua's sizes and refusal are the store's: as many records kept and
    appends dropped at once, a token as long, the span the client sends 2 bytes under the
    cut flag for any batch."""
    source = (ROOT / "lua" / "includes" / "ring.lua").read_text()
    sizes = re.search(
        r"^local OPS_KEPT, TOKEN_SIZE, RESULT_SIZE, APPEND_SIZE, APPENDS_DROPPED = (.+)$",
        source,
        re.M,
    )
    cut = re.search(r"^local SPAN_CUT = (\d+)", source, re.M)
    why = re.search(r"^local PARTLY_REMOVED = '(.+)'$", source, re.M)
    assert sizes
    assert cut
    assert why
    kept, token, _, record, dropped = map(int, sizes.group(1).split(", "))
    assert (kept, token, record) == (OPS_KEPT, OP_TOKEN_BYTES, OP_TOKEN_BYTES + 2)
    assert dropped == APPENDS_DROPPED
    assert why.group(1) == PARTLY_REMOVED
    assert int(cut.group(1)) == 1 << 15 > MAX_BATCH_MESSAGES
    assert [span(n) for n in (1, 32, 33, MAX_BATCH_MESSAGES)] == [
        b"\x00\x01",
        b"\x00\x20",
        b"\x00\x21",
        MAX_BATCH_MESSAGES.to_bytes(2, "big"),
    ]


def test_result_codes_map_to_distinct_exceptions() -> None:
    """Every refusal code has its own exception; an unknown code raises HistoryError;
    a reply that is not a refusal array is the script's result."""
    assert len(set(ERRORS.values())) == len(ERRORS)
    history = RedisHistory(fakeredis.FakeRedis(), "c")
    with pytest.raises(Exception, match="unknown script result code 99"):
        history.core._checked([99, -1, b"?"])
    assert history.core._checked(7) == 7
    assert history.core._checked(b"ready:0") == b"ready:0"


@pytest.mark.parametrize("filename", LUA_FILES)
def test_scripts_carry_only_helpers_they_use(filename: str) -> None:
    """Every call re-creates the helpers a script includes, so none is carried unused."""
    source = script_source(filename.rsplit("-", 1)[0])
    for name in re.findall(r"^local function (\w+)", source, re.MULTILINE):
        uses = re.findall(rf"\b{name}\(", source)
        assert len(uses) > 1, f"{filename} includes {name} but never calls it"


@pytest.mark.real_redis
def test_a_flushed_script_cache_is_reloaded(real_redis: redis.Redis, redis_url: str) -> None:
    """After SCRIPT FLUSH (a restarted or failed-over server), sync and async calls reload."""
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("one"))
    real_redis.script_flush()
    history.append(Message.assistant("two"))

    async def async_append() -> int:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            async_history = AsyncRedisHistory(client, "c")
            await client.script_flush()
            await async_history.append(Message.user("three"))
            return await async_history.len()
        finally:
            await client.aclose()

    assert asyncio.run(async_append()) == 3
    assert [m.content for m in history.snapshot()] == ["one", "two", "three"]


@pytest.mark.slow
def test_wheel_contains_every_script(tmp_path: Path) -> None:
    """The built wheel ships every .lua file, every Python module and the py.typed marker."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for tree in ("redis_history", "lua"):
        shutil.copytree(ROOT / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(source)],
        check=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("redis_history-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for filename in LUA_FILES:
        assert f"redis_history/lua/{filename}" in names
    for include in (ROOT / "lua" / "includes").glob("*.lua"):
        assert f"redis_history/lua/includes/{include.name}" in names
    assert "redis_history/py.typed" in names
    for module in (ROOT / "redis_history").rglob("*.py"):
        assert module.relative_to(ROOT).as_posix() in names


def test_the_store_script_keeps_as_many_message_ids_as_the_memory_allows() -> None:
    source = (ROOT / "lua" / "memory_store-9.lua").read_text()
    found = re.search(r"^local MAX_MESSAGE_IDS = (\d+)", source, re.MULTILINE)
    assert found is not None
    assert int(found.group(1)) == MAX_MESSAGE_IDS
