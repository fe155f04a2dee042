"""The command line: the demo runs and checks its invariants; show prints or refuses clearly."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
import redis

from redis_history import Message, RedisHistory
from redis_history.cli import main
from redis_history.demo import DemoReport, check_conversation, run_demo

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
    assert "started an embedded Redis" in result.stdout
    assert "invariants hold" in result.stdout


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
    """An unknown conversation exits 2 saying so, without a traceback."""
    assert main(["show", "nobody", "--redis-url", redis_url]) == 2
    assert "no such conversation" in capsys.readouterr().err
