"""Where ``redis-history acl`` takes the tenant's password from, besides the command line that
shell history and process lists keep: an environment variable, stdin, or a prompt."""

from __future__ import annotations

import hashlib
import os
import pty
import select
import subprocess
import sys

from commands import ROOT, clean_env, cli

PASSWORD = "a tenant's pass phrase"
HASHED = "#" + hashlib.sha256(PASSWORD.encode()).hexdigest()
RULE = ("acl", "tenant-a", "--user", "tenant-a")


def test_the_password_comes_from_the_environment() -> None:
    done = cli(*RULE, env=clean_env(REDIS_HISTORY_ACL_PASSWORD=PASSWORD))
    assert done.returncode == 0, done.stderr
    assert f"'{HASHED}'" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr


def test_the_password_comes_from_stdin_and_wins_over_the_environment() -> None:
    done = cli(
        *RULE,
        "--password-stdin",
        stdin=PASSWORD + "\n",
        env=clean_env(REDIS_HISTORY_ACL_PASSWORD="another"),
    )
    assert done.returncode == 0, done.stderr
    assert f"'{HASHED}'" in done.stdout


def test_without_a_password_and_a_terminal_it_says_each_way_and_prints_no_rule() -> None:
    done = cli(*RULE)
    assert done.returncode == 2
    assert done.stdout == ""
    for way in ("--password-stdin", "REDIS_HISTORY_ACL_PASSWORD", "terminal"):
        assert way in done.stderr
    both = cli(*RULE, "--password", "x", "--password-stdin", stdin="y\n")
    assert both.returncode == 2
    assert "not both" in both.stderr
    empty = cli(*RULE, "--password-stdin", stdin="\n")
    assert empty.returncode == 2
    assert "password is empty" in empty.stderr


def _read_until(controller: int, said: bytes) -> bytes:
    """What the terminal shows up to ``said``; fails, rather than hang, if it never comes."""
    seen = b""
    while said not in seen:
        ready, _, _ = select.select([controller], [], [], 60)
        assert ready, f"the terminal never showed {said!r}: {seen!r}"
        seen += os.read(controller, 1024)
    return seen


def _ask_on_a_terminal(first: str, second: str) -> tuple[subprocess.CompletedProcess[str], bytes]:
    """Run ``acl`` with a terminal of its own as its controlling terminal, and answer its
    two questions; what it printed, and what the terminal showed."""
    controller, terminal = pty.openpty()
    # a new session (start_new_session) whose first terminal opened, stdin's, is its own
    take_the_terminal = (
        "import os, sys; os.close(os.open(os.ttyname(0), os.O_RDWR)); "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", take_the_terminal, "-m", "redis_history", *RULE],
        stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT, env=clean_env(), start_new_session=True,
    )  # fmt: skip
    os.close(terminal)
    try:
        shown = _read_until(controller, b"password for ACL user tenant-a: ")
        os.write(controller, first.encode() + b"\n")
        shown += _read_until(controller, b"again: ")
        os.write(controller, second.encode() + b"\n")
        out, err = child.communicate(timeout=60)
    finally:
        os.close(controller)
        if child.poll() is None:
            child.kill()
            child.wait()
    return subprocess.CompletedProcess(child.args, child.returncode, out, err), shown


def test_on_a_terminal_it_asks_twice_without_echo() -> None:
    """The prompt echoes nothing of the password; the rule holds its hash."""
    done, shown = _ask_on_a_terminal(PASSWORD, PASSWORD)
    assert done.returncode == 0, done.stderr
    assert f"'{HASHED}'" in done.stdout
    assert PASSWORD.encode() not in shown
    differ, _ = _ask_on_a_terminal(PASSWORD, "something else")
    assert differ.returncode == 2
    assert differ.stdout == ""
    assert "the two passwords differ" in differ.stderr
