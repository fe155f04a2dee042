"""The settings module: every REDIS_HISTORY_* variable named once, with its default and meaning."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from redis_history import settings
from redis_history.compaction import jobs
from redis_history.settings import VARIABLES, Variable, WorkerSettings

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"REDIS_HISTORY_[A-Z0-9]+(?:_[A-Z0-9]+)*")


def used_names() -> dict[str, set[str]]:
    """Every REDIS_HISTORY_* name in the package, worker/, the docs and the deployment files."""
    files = [
        *sorted((ROOT / "redis_history").rglob("*.py")),
        *sorted((ROOT / "worker").rglob("*.py")),
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "docker-compose.yml",
        ROOT / "Dockerfile",
    ]
    found: dict[str, set[str]] = {}
    for path in files:
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_variable_in_use_is_declared_in_the_settings_module() -> None:
    """A REDIS_HISTORY_* name anywhere in the package or the docs is one of settings.VARIABLES."""
    declared = {variable.name for variable in VARIABLES}
    used = used_names()
    assert {"REDIS_HISTORY_URL", "REDIS_HISTORY_SUMMARIZER_TIMEOUT"} <= used.keys()
    undeclared = {name: files for name, files in used.items() if name not in declared}
    assert not undeclared, f"declare these in redis_history/settings.py: {undeclared}"
    source = (ROOT / "redis_history" / "settings.py").read_text(encoding="utf-8")
    for name in declared:
        assert source.count(f'"{name}"') == 1, f"{name} is named once, where it is declared"


def test_each_variable_has_a_unique_name_a_meaning_and_a_default_read_when_unset() -> None:
    """Names are unique and prefixed, meanings are written, and unset or empty gives the default."""
    names = [variable.name for variable in VARIABLES]
    assert len(names) == len(set(names))
    module_variables = [v for v in vars(settings).values() if isinstance(v, Variable)]
    assert sorted(v.name for v in module_variables) == sorted(names), "VARIABLES lists them all"
    for variable in VARIABLES:
        assert variable.name.startswith("REDIS_HISTORY_")
        assert variable.meaning.strip()
        assert variable.read({}) == variable.default
        assert variable.read({variable.name: ""}) == variable.default


def test_the_operations_page_lists_every_variable_in_order_with_its_default() -> None:
    """docs/operations.md's table names each variable once, in VARIABLES' order, with the
    default the settings module declares."""
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(REDIS_HISTORY_\w+)` \|.*\| (.+) \|$", page, re.MULTILINE)
    assert [name for name, _ in rows] == [variable.name for variable in VARIABLES]
    for (name, shown), variable in zip(rows, VARIABLES, strict=True):
        default = variable.default
        if name == "REDIS_HISTORY_TOKEN_COUNTER":
            default = WorkerSettings().token_counter or "o200k_base"  # None: the exact counter
        if isinstance(default, bool):
            assert shown == ("on" if default else "off"), name
        elif name in (
            "REDIS_HISTORY_METRICS_PORT",
            "REDIS_HISTORY_TENANTS",
            "REDIS_HISTORY_MEMORY_EMBEDDER",
            "REDIS_HISTORY_MEMORY_TTL",
            "REDIS_HISTORY_MEMORY_CAP",
            "REDIS_HISTORY_ACL_PASSWORD",
        ):
            assert shown == "none", name
        elif name == "REDIS_HISTORY_TENANT_POLICY":
            assert shown == "`CompactionPolicy()`", name
        elif default is None:
            assert shown == "the store", name  # the queue's Redis is the store's
        else:
            expected = f"{default:g}" if isinstance(default, float) else str(default)
            assert shown.strip("`") == expected, name


def test_the_default_url_is_written_once() -> None:
    """The default store URL is spelled in the settings module only."""
    default = settings.DEFAULT_URL
    holders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "redis_history").rglob("*.py"))
        if default in path.read_text(encoding="utf-8")
    ]
    assert holders == ["redis_history/settings.py"]


@pytest.mark.parametrize(
    ("variable", "raw", "value"),
    [
        (settings.CLUSTER, " Yes ", True),
        (settings.CLUSTER, "off", False),
        (settings.SUMMARIZER_TIMEOUT, "7.5", 7.5),
        (settings.SUMMARIZER_MAX_RETRIES, "0", 0),
        (settings.QUEUE_URL, "redis://queue:6379/1", "redis://queue:6379/1"),
        (settings.METRICS_PORT, "9121", 9121),
    ],
)
def test_values_are_parsed(variable: Variable[object], raw: str, value: object) -> None:
    """Flags, seconds and counts are parsed from their text."""
    assert variable.read({variable.name: raw}) == value


@pytest.mark.parametrize(
    ("variable", "raw", "fragment"),
    [
        (settings.CLUSTER, "maybe", "must be one of 1/true/yes/on or 0/false/no/off"),
        (settings.SUMMARIZER_TIMEOUT, "soon", "must be a number of seconds"),
        (settings.SUMMARIZER_MAX_RETRIES, "-1", "must be a whole number >= 0"),
        (settings.SUMMARIZER_MAX_RETRIES, "two", "must be a whole number >= 0"),
        (settings.METRICS_PORT, "0", "must be a TCP port, 1 to 65535"),
        (settings.METRICS_PORT, "http", "must be a TCP port, 1 to 65535"),
    ],
)
def test_a_bad_value_names_its_variable(
    variable: Variable[object], raw: str, fragment: str
) -> None:
    """A value that does not parse is a ValueError naming the variable and quoting the value."""
    with pytest.raises(ValueError, match=re.escape(f"{variable.name} {fragment}, got {raw!r}")):
        variable.read({variable.name: raw})


def test_read_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a mapping, os.environ is read."""
    monkeypatch.setenv(settings.QUEUE.name, "from-env")
    assert settings.QUEUE.read() == "from-env"


def test_worker_settings_are_one_class_wherever_imported() -> None:
    """jobs re-exports the settings module's WorkerSettings and defaults, not copies."""
    assert jobs.WorkerSettings is WorkerSettings
    assert (jobs.DEFAULT_URL, jobs.DEFAULT_QUEUE) == (settings.DEFAULT_URL, settings.DEFAULT_QUEUE)
    assert WorkerSettings() == WorkerSettings.from_env({})


def test_the_settings_module_needs_no_rq() -> None:
    """Pods and summarizers read settings without rq installed (only jobs and worker/ import it)."""
    code = "import sys; sys.modules['rq'] = None; import redis_history.settings"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


BEFORE_REDIS_PY_7_2 = """
import sys
import redis
sys.modules["redis.driver_info"] = None  # what redis-py before 7.2 lacks
import redis_history, redis_history.cli, redis_history.compaction.jobs
from redis_history.settings import WorkerSettings, _client_options, driver_info
assert driver_info() is None and _client_options() == {}
redis_history.compaction.jobs._preload()
WorkerSettings().store_client(), WorkerSettings().queue_client()  # made, never connected
"""


def test_the_package_imports_and_makes_clients_without_redis_py_driver_info() -> None:
    """On a redis-py without ``redis.driver_info`` (before 7.2) the package imports and a
    worker makes its clients with redis-py's own name and version."""
    result = subprocess.run(
        [sys.executable, "-c", BEFORE_REDIS_PY_7_2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
