"""What the operator's commands tell a newcomer: which namespaces hold anything, what a denial
means and what to do about it, and a conversation's accounting in words and units."""

from __future__ import annotations

import json

import pytest
import redis
from commands import SECRET, cli, url

from redis_history import (
    AccessDeniedError,
    CompactionPolicy,
    ExtractiveSummarizer,
    Message,
    RedisHistory,
)
from redis_history.compaction.run import run_compaction
from redis_history.demo.server import RedisServer, free_port
from redis_history.memory import RedisLongTermMemory
from redis_history.wire import denial_advice, outage_advice

pytestmark = pytest.mark.real_redis


def test_namespaces_lists_each_namespace_with_its_conversations_and_memory_owners(
    redis_server: RedisServer,
) -> None:
    """Conversations in two namespaces and memories in a third are each counted once (a
    conversation's several keys, an owner's several keys), and keys no namespace of the
    store could have written are left out."""
    client = redis_server.client()
    client.flushall()
    for namespace, conversation in (("tenant-a", "c1"), ("tenant-a", "c2"), ("tenant-b", "c1")):
        history = RedisHistory(client, conversation, namespace=namespace)
        history.append_many([Message.user("hi"), Message.assistant("hello")])
    memory = RedisLongTermMemory(client, namespace="tenant-c")
    memory.store("Prefers green tea.", {"agent_id": "a", "user_id": "u"})
    memory.store("Lives in Porto.", {"agent_id": "a", "user_id": "v"})
    client.set("rh:bad space:{x}:msgs", "another program's")
    client.set("other:tenant-d:{x}:msgs", "another prefix")
    done = cli("namespaces", "--json", "--redis-url", redis_server.url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"namespace": "tenant-a", "conversations": 2, "memory_owners": 0},
        {"namespace": "tenant-b", "conversations": 1, "memory_owners": 0},
        {"namespace": "tenant-c", "conversations": 0, "memory_owners": 2},
    ]
    table = cli("namespaces", "--redis-url", redis_server.url).stdout.splitlines()
    assert table[0].split() == ["NAMESPACE", "CONVERSATIONS", "MEMORY", "OWNERS"]
    assert [row.split() for row in table[1:]] == [
        ["tenant-a", "2", "0"],
        ["tenant-b", "1", "0"],
        ["tenant-c", "0", "2"],
    ]


def test_ls_of_an_empty_namespace_points_to_the_namespaces_that_hold_some(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    client.flushall()
    RedisHistory(client, "c1", namespace="tenant-a").append(Message.user("hi"))
    done = cli("ls", "--redis-url", redis_server.url)
    assert done.returncode == 0, done.stderr
    assert "no conversation in namespace default" in done.stderr
    assert "`redis-history namespaces` lists the namespaces" in done.stderr
    listed = cli("ls", "--redis-url", redis_server.url, "--namespace", "tenant-a")
    assert "no conversation" not in listed.stderr
    assert listed.stdout.splitlines()[1].startswith("c1 ")


@pytest.mark.parametrize("command", [["ls"], ["stats", "c"], ["namespaces"], ["show", "c"]])
def test_a_server_that_needs_a_password_says_so_and_where_to_give_it(
    command: list[str], guarded: RedisServer
) -> None:
    """No password given: the line says the server needs one and where it goes (the URL or
    REDIS_HISTORY_URL), then what Redis said; a listing's error names no conversation."""
    done = cli(*command, "--redis-url", f"redis://127.0.0.1:{guarded.port}/0")
    assert done.returncode == 5, done.stderr
    line = done.stderr.splitlines()[-1]
    assert "denied access: it needs a password and none was given" in line
    assert "REDIS_HISTORY_URL" in line
    assert "Redis said:" in line
    assert "(conversation default/scan)" not in line
    if command[0] in ("ls", "namespaces"):
        assert f"Redis at redis://127.0.0.1:{guarded.port}/0 denied access" in line


def test_a_wrong_password_is_named_as_such(guarded: RedisServer) -> None:
    done = cli("ls", "--redis-url", url(guarded.port, "not-the-password"))
    assert done.returncode == 5, done.stderr
    line = done.stderr.splitlines()[-1]
    assert "the URL's user or password was refused" in line
    assert "not-the-password" not in done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_an_acl_refusal_points_to_the_tenant_rule(redis_server: RedisServer) -> None:
    """A user whose rule lacks a command the store sends is told where the rule comes from."""
    admin = redis_server.client()
    admin.acl_setuser("narrow", enabled=True, passwords=["+pw"], keys=["*"], commands=["+ping"])
    client = redis.Redis(port=redis_server.port, username="narrow", password="pw")
    with pytest.raises(AccessDeniedError) as refused:
        RedisHistory(client, "c").append(Message.user("hi"))
    said = str(refused.value)
    assert "`redis-history acl` prints the rule a tenant needs" in said
    assert "NOPERM" in said or "no permissions" in said.lower()


def test_denial_advice_reads_what_each_redis_says() -> None:
    """The replies of Redis 6.2 to 8 to a client with no password, a wrong one, and an ACL
    refusal, each to its advice; anything else to none."""
    assert "none was given" in denial_advice("NOAUTH Authentication required.")
    assert "none was given" in denial_advice(
        "HELLO must be called with the client already authenticated, otherwise ..."
    )
    assert "none was given" in denial_advice("Protocol error: unauthenticated multibulk length")
    assert "refused" in denial_advice(
        "WRONGPASS invalid username-password pair or user is disabled."
    )
    assert "redis-history acl" in denial_advice("NOPERM User u has no permissions to run 'evalsha'")
    assert denial_advice("ERR unknown command") == ""


def test_stats_speaks_in_units_and_words(redis_server: RedisServer) -> None:
    """The TTL and the time left carry their unit, flags read yes or no, and the last
    compaction is a sentence; --json keeps the data as it is."""
    client = redis_server.client()
    client.flushall()
    history = RedisHistory(client, "c", ttl=90_000)
    for n in range(4):
        history.append_many(
            [Message.user(f"question {n} " * 20), Message.assistant("answer " * 20)]
        )
    policy = CompactionPolicy(soft_tokens=10, keep_last_turns=1, min_messages=2)
    assert run_compaction(history, ExtractiveSummarizer(), policy).status == "compacted"
    done = cli("stats", "c", "--redis-url", redis_server.url)
    assert done.returncode == 0, done.stderr
    rows = dict(line.split("  ", 1) for line in done.stdout.splitlines())
    shown = {name.strip(): value.strip() for name, value in rows.items()}
    assert shown["ttl"] == "90000 s (1d 1h)"
    assert shown["expires in"].startswith("8")
    assert " s (1d " in shown["expires in"]
    assert shown["compaction pending"] == "no"
    assert shown["compacting"] == "no"
    last = shown["last compaction"]
    assert last.startswith("at 20")
    assert ", summary " in last
    assert " messages" in last
    data = json.loads(cli("stats", "c", "--json", "--redis-url", redis_server.url).stdout)
    assert data["ttl"] == 90_000
    assert set(data["last_compaction"]) >= {"at", "message_id"}


def test_a_server_that_cannot_be_reached_says_what_to_check() -> None:
    """A closed port and a host name that does not resolve each get their advice after what
    redis-py said (exit 4); the line stays one line."""
    closed = cli("ls", "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert closed.returncode == 4, closed.stderr
    line = closed.stderr.splitlines()[-1]
    assert "Connection refused" in line
    assert line.endswith(
        "(nothing listens there: start a Redis, or name the one to use in the URL, "
        "REDIS_HISTORY_URL or --redis-url)"
    )
    assert "does not resolve" in outage_advice(
        "Error -2 connecting to nosuchhost.invalid:6379. Name or service not known."
    )
    assert outage_advice("Timeout reading from socket") == ""
