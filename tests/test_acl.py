"""``redis-history acl``: the printed ``ACL SETUSER`` rule, applied on real Redis 7 and on the
embedded Redis 6.2, lets a tenant run a whole pod turn, a compaction claim and a compaction in
its namespace, and denies it another tenant's conversation (read or write: AccessDeniedError,
exit 5), the key names of others, and everything dangerous; namespaces that would widen the
key pattern are refused."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from commands import cli
from samples import STAGED_TEXT

from redis_history import (
    AccessDeniedError,
    CompactionPolicy,
    CompactionRequest,
    ExtractiveSummarizer,
    Message,
    RedisHistory,
    ScriptsNotLoadedError,
    ToolCall,
)
from redis_history.admin.acl import setuser_command, tenant_rule
from redis_history.compaction.run import run_compaction
from redis_history.context import into_request
from redis_history.demo.server import LocalCluster, RedisServer
from redis_history.memory import MemoryFilters, RedisLongTermMemory
from redis_history.memory.embedders import HashingEmbedder
from redis_history.store.keys import job_id_prefix

pytestmark = pytest.mark.real_redis

PASSWORD = "tenant a's pw"
BIG = STAGED_TEXT
"""A tool result large enough for its append to be staged (MULTI, RPUSHX, RENAME, EXEC)."""


@pytest.fixture(params=["redis-7", "redis-6.2", "redis-8"])
def server(request: pytest.FixtureRequest) -> RedisServer:
    """The session's Redis 7, the embedded Redis 6.2, and Redis 8 (vector sets)."""
    name = {"redis-7": "redis_server", "redis-6.2": "embedded_server"}.get(
        request.param, "vector_server"
    )
    running: RedisServer = request.getfixturevalue(name)
    return running


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """The default user, every key flushed; the tenant's user removed afterwards."""
    client = server.client()
    client.flushall()
    yield client
    client.acl_deluser("tenant-a")
    client.close()


def applied(admin: redis.Redis, *args: str) -> None:
    """Run ``redis-history acl`` and apply the line it prints, as an operator would."""
    result = cli("acl", *args)
    assert result.returncode == 0, result.stderr
    command = shlex.split(result.stdout)
    assert command[:2] == ["ACL", "SETUSER"]
    assert PASSWORD not in result.stdout, "the password is printed as its SHA-256 only"
    admin.execute_command(*command)  # type: ignore[no-untyped-call]


def version(admin: redis.Redis) -> str:
    """The server's ``MAJOR.MINOR``, as ``acl --redis-version`` takes it."""
    return ".".join(str(admin.info("server")["redis_version"]).split(".")[:2])


@pytest.fixture
def tenant(server: RedisServer, admin: redis.Redis) -> Iterator[redis.Redis]:
    """A client of tenant-a's user, made by the printed rule, once the operator loaded the
    store's scripts."""
    loaded = cli("load-scripts", "--redis-url", server.url)
    assert loaded.returncode == 0, loaded.stderr
    rule = ("tenant-a", "--user", "tenant-a", "--password", PASSWORD)
    applied(admin, *rule, "--redis-version", version(admin))
    client = server.client(username="tenant-a", password=PASSWORD)
    yield client
    client.close()


def test_the_tenant_runs_a_whole_pod_turn_and_a_compaction(tenant: redis.Redis) -> None:
    """In its namespace the tenant appends (staged too), renders, records tokens, rolls back,
    claims a compaction, compacts under the lock as a worker does, reads the transcript,
    forks (not into another namespace), expires and deletes, and keeps long-term memories."""
    history = RedisHistory(tenant, "c", namespace="tenant-a", ttl=3600)
    history.append(Message.system("You are a travel agent."))
    for turn in range(4):
        history.advance_turn()
        history.append(Message.user(f"Weather in city {turn}?"))
        request = into_request(history, format="openai_chat")
        call = ToolCall(id=f"t{turn}", name="weather", arguments={"city": turn})
        history.append_many(
            [
                Message.assistant("", tool_calls=[call]),
                Message.tool(BIG, tool_call_id=call.id),
                Message.assistant("Sunny."),
            ]
        )
        history.record_input_tokens(20 + 10 * len(request["messages"]))
    failed = Message.user("a turn that fails")
    history.append(failed)
    assert history.rollback([failed]) == 1
    scheduled: list[CompactionRequest] = []
    policy = CompactionPolicy(soft_tokens=100, keep_last_turns=1, min_messages=2)
    assert history.maybe_compact(scheduled.append, policy)
    assert run_compaction(history, ExtractiveSummarizer(), policy).status == "compacted"
    assert history.release_compaction_claim(scheduled[0].job_id)
    assert len(history.transcript()) == 17
    assert history.compaction_stats().compactions == 1
    branch = history.fork("c-branch", at=history.snapshot()[-1].id)
    assert branch.transcript() == history.transcript()
    with pytest.raises(AccessDeniedError):
        history.fork("c-branch", at=history.snapshot()[-1].id, namespace="tenant-b")
    memory = RedisLongTermMemory(tenant, namespace="tenant-a")
    memory.store("likes the sea", {"agent_id": "agent"})
    assert memory.recall("sea", MemoryFilters("agent"), 5)
    assert history.set_ttl(60)
    assert history.delete()


DENIED: dict[str, Callable[[RedisHistory], Any]] = {
    "read": lambda history: history.snapshot(),
    "estimate": lambda history: history.token_estimate(),
    "append": lambda history: history.append(Message.assistant("mine now")),
    "staged-append": lambda history: history.append_many([Message.assistant(BIG)]),
    "delete": lambda history: history.delete(),
}


def test_the_tenant_recalls_by_meaning(tenant: redis.Redis, admin: redis.Redis) -> None:
    """Long-term memory with an embedder runs under the rule on every server: vectors kept,
    searched and dropped in the namespace (a vector set on Redis 8, a hash before)."""
    memory = RedisLongTermMemory(tenant, namespace="tenant-a", embedder=HashingEmbedder())
    owner = {"agent_id": "a", "user_id": "u"}
    first, _ = memory.store_many([("aisle seat please", owner), ("jazz band on Thursdays", owner)])
    assert [r.text for r in memory.recall("aisle", MemoryFilters("a", "u"), 1)] == [
        "aisle seat please"
    ]
    assert memory.forget(first, MemoryFilters("a", "u"))
    assert memory.reindex("a", "u", rebuild=True) == (0, 1)
    names = {str(key, "utf-8") for key in admin.keys("*") if isinstance(key, bytes)}
    assert names
    assert all(name.startswith("rh:tenant-a:") for name in names), names
    assert memory.forget_owner("a", "u") == 1  # the tenant forgets a user by itself
    assert not admin.keys("rh:tenant-a:mem:{a:u}:*")


@pytest.mark.parametrize("action", DENIED)
def test_another_tenants_conversation_is_denied(
    tenant: redis.Redis, admin: redis.Redis, action: str
) -> None:
    """Reading or writing tenant-b's conversation is AccessDeniedError; it is left as it was."""
    theirs = RedisHistory(admin, "c", namespace="tenant-b")
    theirs.append(Message.user("secret plans"))
    before = theirs.entries()
    with pytest.raises(AccessDeniedError):
        DENIED[action](RedisHistory(tenant, "c", namespace="tenant-b"))
    assert theirs.entries() == before


def test_the_commands_exit_5_on_another_tenants_conversation(
    tenant: redis.Redis, admin: redis.Redis, server: RedisServer
) -> None:
    """The command line with the tenant's credentials: its own conversation is shown, another
    tenant's is exit 5 (permission), and so is a listing (SCAN is not the tenant's)."""
    RedisHistory(admin, "c", namespace="tenant-b").append(Message.user("secret plans"))
    RedisHistory(tenant, "c", namespace="tenant-a").append(Message.user("mine"))
    address = f"redis://tenant-a:{PASSWORD.replace(' ', '%20')}@127.0.0.1:{server.port}/0"
    mine = cli("show", "c", "--namespace", "tenant-a", "--redis-url", address)
    assert mine.returncode == 0, mine.stderr
    for command in (["show", "c"], ["stats", "c"], ["export", "c"], ["ls"]):
        refused = cli(*command, "--namespace", "tenant-b", "--redis-url", address)
        assert refused.returncode == 5, (command, refused.stderr)
        assert "secret plans" not in refused.stdout
        assert PASSWORD not in refused.stderr


def test_nothing_dangerous_and_no_other_key_names(tenant: redis.Redis, admin: redis.Redis) -> None:
    """The tenant cannot list keys (SCAN, KEYS, RANDOMKEY, CLUSTER GETKEYSINSLOT), read the
    server's counts, log or clients (INFO, DBSIZE, SLOWLOG, MONITOR, CLIENT LIST), read
    another key through its own (SORT ... GET, which Redis 6.2 does not check), flush data
    or scripts, change the configuration, or publish."""
    RedisHistory(admin, "c", namespace="tenant-b").append(Message.user("secret plans"))
    tenant.rpush("rh:tenant-a:{mine}:list", "{c}:meta")
    refused: list[Callable[[], Any]] = [
        tenant.scan,
        lambda: tenant.keys("*"),
        tenant.randomkey,
        tenant.dbsize,
        tenant.info,
        tenant.slowlog_get,
        tenant.flushall,
        tenant.script_flush,
        lambda: tenant.config_set("maxmemory-policy", "allkeys-lru"),
        lambda: tenant.publish("channel", "hi"),
        tenant.client_list,
        lambda: tenant.execute_command("MONITOR"),  # type: ignore[no-untyped-call]
        lambda: tenant.execute_command("CLUSTER", "GETKEYSINSLOT", 0, 10),  # type: ignore[no-untyped-call]
        lambda: tenant.sort("rh:tenant-a:{mine}:list", by="nosort", get=["rh:tenant-b:*->total"]),
    ]
    for attempt in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()


def test_the_tenant_cannot_track_other_tenants_key_names(
    server: RedisServer, tenant: redis.Redis, admin: redis.Redis
) -> None:
    """Client-side caching would push the name of every key any client changes (``CLIENT
    TRACKING ... BCAST``, over RESP3 or to a subscriber of ``__redis__:invalidate``): the
    rule grants neither the tracking nor the channel."""
    resp3 = server.client(username="tenant-a", password=PASSWORD, protocol=3)
    try:
        for tracking in (("ON", "BCAST"), ("ON",)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                resp3.execute_command("CLIENT", "TRACKING", *tracking)  # type: ignore[no-untyped-call]
        RedisHistory(admin, "secret-ticket-4711", namespace="tenant-b").append(
            Message.user("secret plans")
        )
        assert resp3.ping()  # no push came before the reply
    finally:
        resp3.close()
    with pytest.raises(redis.exceptions.NoPermissionError):
        tenant.execute_command("SUBSCRIBE", "__redis__:invalidate")  # type: ignore[no-untyped-call]


def test_the_tenant_runs_no_lua_of_its_own(admin: redis.Redis, tenant: redis.Redis) -> None:
    """A tenant's own Lua (a loop that would stall every other tenant) is refused, whether
    sent as a script, loaded into the cache or loaded as a function; the store's functions
    (Redis 7) or its loaded scripts (6.2) are all it runs."""
    loop = "local i = 0 while true do i = i + 1 end"
    library = f"#!lua name=mine\nredis.register_function('spin', function() {loop} end)"
    refused: list[Callable[[], Any]] = [
        lambda: tenant.eval(loop, 0),
        lambda: tenant.script_load(loop),
    ]
    if version(admin) != "6.2":  # which has no functions
        refused += [
            lambda: tenant.execute_command("FUNCTION", "LOAD", library),  # type: ignore[no-untyped-call]
            lambda: tenant.execute_command("FUNCTION", "FLUSH"),  # type: ignore[no-untyped-call]
        ]
    for attempt in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    sha = hashlib.sha1(loop.encode()).hexdigest()
    if version(admin) == "6.2":  # EVALSHA runs what the cache holds, and the tenant adds none
        with pytest.raises(redis.exceptions.NoScriptError):
            tenant.evalsha(sha, 0)
    history = RedisHistory(tenant, "c", namespace="tenant-a")
    history.append(Message.user("hi"))
    assert history.snapshot()[0].content == "hi"
    assert not admin.script_exists(sha)[0]


def test_a_tenant_before_the_scripts_are_loaded_is_told_so(
    server: RedisServer, tenant: redis.Redis, admin: redis.Redis
) -> None:
    """With the store's functions (Redis 7) or scripts (6.2) gone from the server, a tenant's
    write is ScriptsNotLoadedError, having written nothing; once the operator loads them
    again, the same call succeeds. Functions are the server's data, not its script cache:
    on Redis 7 they survive a SCRIPT FLUSH."""
    history = RedisHistory(tenant, "c", namespace="tenant-a")
    history.append(Message.user("hi"))
    if version(admin) != "6.2":
        admin.script_flush()
        history.append(Message.assistant("still served"))
        history.append(Message.user("go on"))
        admin.execute_command("FUNCTION", "FLUSH")  # type: ignore[no-untyped-call]
    else:
        admin.script_flush()
    before = {key: admin.dump(key) for key in admin.keys("*")}
    with pytest.raises(ScriptsNotLoadedError, match="load-scripts"):
        history.append_many([Message.assistant("later"), Message.user("and then")])
    with pytest.raises(ScriptsNotLoadedError):
        history.append_many([Message.assistant(BIG)])  # staged: MULTI, the script, RPUSHX, RENAME
    assert {key: admin.dump(key) for key in admin.keys("*")} == before
    loaded = cli("load-scripts", "--redis-url", server.url)
    assert loaded.returncode == 0, loaded.stderr
    history.append_many([Message.assistant("later"), Message.user("and then")])
    assert [m.content for m in history.snapshot()][-2:] == ["later", "and then"]


@pytest.mark.parametrize("namespace", ["tenant*", "tenant?", "tenant[ab]", "ten\\ant", "a{b}"])
def test_namespaces_that_would_widen_the_pattern_are_refused(namespace: str) -> None:
    """A namespace whose pattern would reach other namespaces' keys is a usage error (exit 2),
    and no rule is printed."""
    result = cli("acl", namespace, "--user", "u", "--password", "pw")
    assert result.returncode == 2
    assert result.stdout == ""
    with pytest.raises(ValueError, match="namespace"):
        tenant_rule(namespace, user="u", password="pw")


def test_the_rule_resets_the_user_and_hides_the_password() -> None:
    """The rule starts from nothing (reset), names the password by its SHA-256, confines the
    keys to the namespace, its queue and its jobs, and names every command it grants: no
    category, no EVAL or SCRIPT, FCALL on Redis 7 and EVALSHA on 6.2."""
    rule = tenant_rule("tenant-a", user="u", password="pw")
    assert rule[:3] == ["u", "reset", "on"]
    assert rule[3] == "#30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"
    assert [r for r in rule if r.startswith("~")] == [
        "~rh:tenant-a:*",
        "~rq:queue:redis-history:tenant-a",
        f"~rq:job:{job_id_prefix('tenant-a')}{'?' * 32}",
    ]
    assert "pw" not in rule
    grants = [r for r in rule if r[0] in "+-"]
    assert grants[0] == "-@all"
    assert not [r for r in grants[1:] if not r.startswith("+") or "@" in r]
    assert {"+fcall", "+fcall_ro"} <= set(grants)
    assert not {"+eval", "+evalsha", "+script|load", "+function"} & set(grants)
    old = tenant_rule("tenant-a", user="u", password="pw", redis_version=(6, 2))
    assert "+evalsha" in old
    assert not {"+fcall", "+eval", "+script|load"} & set(old)
    assert "+client|setinfo" in tenant_rule("t", user="u", password="pw", redis_version=(7, 2))
    with pytest.raises(ValueError, match="user name"):
        tenant_rule("tenant-a", user="a b", password="pw")
    with pytest.raises(ValueError, match="password"):
        tenant_rule("tenant-a", user="u", password="")


def test_a_namespace_with_a_space_is_refused_by_the_store_and_the_rule(
    admin: redis.Redis, server: RedisServer
) -> None:
    """Redis refuses a key pattern holding a space, so no rule could confine such a
    namespace: `acl` refuses it (exit 2, nothing printed), and so do the store, the
    long-term memory and the commands (exit 2), with nothing written."""
    result = cli("acl", "tenant a", "--user", "u", "--password", "pw")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "space" in result.stderr
    with pytest.raises(redis.exceptions.ResponseError):  # what the old rule ran into
        admin.execute_command("ACL", "SETUSER", "u", "~rh:tenant a:*")  # type: ignore[no-untyped-call]
    with pytest.raises(ValueError, match="space"):
        RedisHistory(admin, "c", namespace="tenant a").append(Message.user("hi"))
    with pytest.raises(ValueError, match="space"):
        RedisLongTermMemory(admin, namespace="tenant a")
    shown = cli("show", "c", "--namespace", "tenant a", "--redis-url", server.url)
    assert shown.returncode == 2
    assert admin.dbsize() == 0


def test_the_rule_works_on_a_cluster(redis_cluster: LocalCluster) -> None:
    """Applied on every node of a cluster, with the store's functions loaded on every primary
    (``load-scripts --cluster``), the rule lets a cluster client connect (it learns the layout
    with CLUSTER SLOTS, SHARDS, NODES and COMMAND) and run a pod turn, a rollback, a fork
    and a compaction; another tenant's conversation is AccessDeniedError, and a slot's key
    names are not the tenant's to list."""
    admins = [node.client() for node in redis_cluster.nodes]
    loaded = cli("load-scripts", "--cluster", "--redis-url", redis_cluster.url)
    assert loaded.returncode == 0, loaded.stderr
    for admin in admins:
        applied(admin, "tenant-a", "--user", "tenant-a", "--password", PASSWORD)
    tenant = redis_cluster.client(username="tenant-a", password=PASSWORD)
    try:
        RedisHistory(redis_cluster.client(), "c", namespace="tenant-b").append(
            Message.user("secret plans")
        )
        history = RedisHistory(tenant, "c", namespace="tenant-a")
        history.append(Message.system("You are a travel agent."))
        for turn in range(3):
            call = ToolCall(id=f"t{turn}", name="weather", arguments={"city": turn})
            history.append_many(
                [
                    Message.user(f"Weather in city {turn}?"),
                    Message.assistant("", tool_calls=[call]),
                    Message.tool(BIG, tool_call_id=call.id),
                    Message.assistant("Sunny."),
                ]
            )
        failed = Message.user("a turn that fails")
        history.append(failed)
        assert history.rollback([failed]) == 1
        policy = CompactionPolicy(soft_tokens=100, keep_last_turns=1, min_messages=2)
        assert run_compaction(history, ExtractiveSummarizer(), policy).status == "compacted"
        assert history.fork("c-branch", at=history.snapshot()[-1].id).transcript()
        with pytest.raises(AccessDeniedError):
            RedisHistory(tenant, "c", namespace="tenant-b").snapshot()
        node = tenant.get_redis_connection(tenant.get_primaries()[0])  # type: ignore[no-untyped-call]
        with pytest.raises(redis.exceptions.NoPermissionError):
            node.execute_command("CLUSTER", "GETKEYSINSLOT", 0, 10)  # type: ignore[no-untyped-call]
    finally:
        tenant.close()
        for admin in admins:
            admin.acl_deluser("tenant-a")
            admin.close()


def test_the_operations_page_shows_the_rule_acl_prints() -> None:
    """docs/operations.md shows the very line `redis-history acl` prints (the password's
    digest aside)."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    [shown] = [line.strip() for line in page.splitlines() if "ACL SETUSER tenant-a" in line]
    printed = setuser_command(tenant_rule("tenant-a", user="tenant-a", password="pw"))
    digest = printed.split("'#")[1].split("'")[0]
    assert shown == printed.replace(digest, "<sha-256 of the password>")
