"""Access failures are AccessDeniedError, not outages, and are not retried: no password, a
wrong one, and an ACL's NOPERM on another tenant's keys (a script, a staged append, a read,
a command denied inside a script), for both histories, the long-term memory and the worker,
on a real redis-server with ``requirepass`` and ACL users."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from samples import STAGED_TEXT, turns
from worker_doubles import InProcessWorker

from redis_history import (
    AccessDeniedError,
    AsyncRedisHistory,
    Message,
    RedisHistory,
    StoreUnavailableError,
)
from redis_history.compaction.jobs import (
    COMPACTION_FUNCTION,
    WorkerSettings,
    compaction_queue,
    configure_worker,
    run_worker,
)
from redis_history.compaction_policy import CompactionPolicy
from redis_history.demo.server import RedisServer
from redis_history.memory import MemoryFilters, RedisLongTermMemory
from redis_history.wire import redis_error

pytestmark = [pytest.mark.real_redis, pytest.mark.usefixtures("signal_handlers")]

ADMIN = "admin-pw"
TENANT = ["-@all", "+@connection", "+@read", "+@write", "+@transaction", "+eval", "+evalsha"]
TENANT += ["+eval_ro", "+evalsha_ro", "+script|load", "+script|exists", "-@dangerous", "-scan"]
TENANT += ["-randomkey"]
"""The tenant rule of the project's notes: its own keys, the store's scripts, nothing else."""
BIG = STAGED_TEXT
"""A message large enough for its append to be staged."""


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A redis-server whose default user needs ``ADMIN``, with two tenant users: ``tenant-a``
    (its keys) and ``no-hmget`` (tenant-a's keys, but not HMGET, which scripts call first)."""
    with RedisServer() as running:
        admin = running.client()
        admin.acl_setuser("tenant-a", enabled=True, passwords=["+a-pw"], keys=["rh:tenant-a:*"],
                          commands=TENANT)  # fmt: skip
        admin.acl_setuser("no-hmget", enabled=True, passwords=["+n-pw"], keys=["rh:tenant-a:*"],
                          commands=[*TENANT, "-hmget"])  # fmt: skip
        admin.config_set("requirepass", ADMIN)
        admin.close()
        yield running


def url(server: RedisServer, credentials: str = "") -> str:
    return f"redis://{credentials}{'@' if credentials else ''}127.0.0.1:{server.port}/0"


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """The default user, with every key flushed before the test."""
    client = redis.Redis.from_url(url(server, f":{ADMIN}"))
    client.flushall()
    client.config_resetstat()
    yield client
    client.close()


def calls(admin: redis.Redis) -> dict[str, tuple[int, int]]:
    """Each command the server ran since the stats were reset: (calls, rejected calls)."""
    stats = admin.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(s["calls"]), int(s.get("rejected_calls", 0)))
        for name, s in stats.items()
        if name not in ("cmdstat_info", "cmdstat_config|resetstat")
    }


Run = Callable[[str, str, Callable[[Any], Any]], Any]
"""Runs ``action(history)`` on a history of conversation ``c`` in a namespace, through a new
client of a URL, sync or asyncio; returns what it returned."""


@pytest.fixture(params=["sync", "asyncio"])
def run(request: pytest.FixtureRequest) -> Run:
    """Both histories, each on a fresh client (``from_url``: no retries of its own)."""

    def sync(address: str, namespace: str, action: Callable[[Any], Any]) -> Any:
        client = redis.Redis.from_url(address)
        try:
            return action(RedisHistory(client, "c", namespace=namespace))
        finally:
            client.close()

    def asyncio_(address: str, namespace: str, action: Callable[[Any], Any]) -> Any:
        async def main() -> Any:
            client = redis.asyncio.Redis.from_url(address)
            try:
                return await action(AsyncRedisHistory(client, "c", namespace=namespace))
            finally:
                await client.aclose()

        return asyncio.run(main())

    return sync if request.param == "sync" else asyncio_


def denied(run: Run, address: str, namespace: str, action: Callable[[Any], Any]) -> str:
    """The AccessDeniedError ``action`` raises (never StoreUnavailableError), as text."""
    with pytest.raises(AccessDeniedError) as caught:
        run(address, namespace, action)
    assert isinstance(caught.value, PermissionError)
    assert not isinstance(caught.value, StoreUnavailableError)
    return str(caught.value)


# -- credentials -------------------------------------------------------------------------------


@pytest.mark.parametrize("credentials", ["", ":wrong-pw", "tenant-a:wrong-pw"])
def test_refused_credentials_are_access_denied(
    run: Run, server: RedisServer, admin: redis.Redis, credentials: str
) -> None:
    """No password or a wrong one is AccessDeniedError (redis-py's AuthenticationError is a
    ConnectionError, which read as "Redis is unavailable"); the password is not shown."""
    text = denied(run, url(server, credentials), "tenant-a", lambda h: h.append(Message.user("x")))
    assert "wrong-pw" not in text
    assert admin.dbsize() == 0


def test_the_memory_reports_refused_credentials_as_access_denied(
    server: RedisServer, admin: redis.Redis
) -> None:
    """The same for the long-term memory."""
    for address in (url(server), url(server, ":wrong-pw")):
        memory = RedisLongTermMemory(redis.Redis.from_url(address), namespace="tenant-a")
        with pytest.raises(AccessDeniedError):
            memory.store("a fact", {"agent_id": "a"})
    assert admin.dbsize() == 0


def test_redis_7_0_refusing_a_client_that_never_authenticated_is_access_denied() -> None:
    """Redis 7.0 refuses a long command from a client that sent no password with a protocol
    error (redis-py before 8 connects without seeing NOAUTH there): access denied too."""
    refused = redis.ResponseError("Protocol error: unauthenticated multibulk length")
    assert isinstance(redis_error(refused), AccessDeniedError)
    other = redis.ResponseError("Protocol error: invalid multibulk length")
    assert not isinstance(redis_error(other), AccessDeniedError)


# -- ACL: another tenant's keys ---------------------------------------------------------------


ACTIONS: dict[str, Callable[[Any], Any]] = {
    "append": lambda h: h.append(Message.user("hi")),
    "staged-append": lambda h: h.append_many([Message.user(BIG)]),
    "read": lambda h: h.snapshot(),
    "length": lambda h: h.len(),
}


@pytest.mark.parametrize("action", ACTIONS)
def test_another_tenants_keys_are_access_denied_once(
    run: Run, server: RedisServer, admin: redis.Redis, action: str
) -> None:
    """A tenant's user touching another tenant's conversation gets AccessDeniedError, writes
    nothing, and the refused command is not sent again (not as a script after a staged
    transaction, not by a retry)."""
    tenant_a = url(server, "tenant-a:a-pw")
    run(tenant_a, "tenant-a", lambda h: h.append(Message.user("mine")))  # the user works
    admin.config_resetstat()
    text = denied(run, tenant_a, "tenant-b", ACTIONS[action])
    assert "no permissions" in text
    assert admin.keys("rh:tenant-b:*") == []
    sent = calls(admin)
    rejected = {name: count for name, (_, count) in sent.items() if count}
    if action == "staged-append":
        assert sent["multi"] == (1, 0)
        assert sent["exec"][0] == 1
        assert rejected == {"evalsha": 1, "rpushx": 1, "rename": 1}
    else:
        assert sum(rejected.values()) == 1, rejected
    assert "eval" not in sent, "no script sent by source after the refusal"


@pytest.mark.parametrize("staged", [False, True], ids=["script", "staged"])
def test_a_command_denied_inside_a_script_is_access_denied(
    run: Run, server: RedisServer, admin: redis.Redis, staged: bool
) -> None:
    """A user whose ACL lets it run the script on its keys but not a command the script calls
    gets AccessDeniedError from inside the script (run alone, or by EXEC), nothing written."""
    message = Message.user(BIG if staged else "hi")
    denied(run, url(server, "no-hmget:n-pw"), "tenant-a", lambda h: h.append_many([message]))
    assert admin.dbsize() == 0


def test_the_memory_reports_another_tenants_keys_as_access_denied(
    server: RedisServer, admin: redis.Redis
) -> None:
    """A tenant's user storing or recalling another tenant's memories gets AccessDeniedError."""
    client = redis.Redis.from_url(url(server, "tenant-a:a-pw"))
    other = RedisLongTermMemory(client, namespace="tenant-b")
    with pytest.raises(AccessDeniedError):
        other.store("a fact", {"agent_id": "a"})
    with pytest.raises(AccessDeniedError):
        other.recall("fact", MemoryFilters("a"), 5)
    assert admin.dbsize() == 0
    client.close()


# -- no retry of refused credentials ---------------------------------------------------------


def handshakes(admin: redis.Redis) -> int:
    """How many times clients tried to authenticate since the stats were reset."""
    sent = calls(admin)
    return sum(sent.get(name, (0, 0))[0] for name in ("auth", "hello"))


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_refused_credentials_are_not_retried_by_the_store(
    server: RedisServer, admin: redis.Redis, flavour: str
) -> None:
    """A connection the store keeps, reconnecting after the user's password changed, tries
    to authenticate once: the refusal is not retried under the connection's Retry (3 retries
    here), which retries the connection error that ended the old connection."""
    admin.acl_setuser("rotating", enabled=True, passwords=["+old-pw"], keys=["*"],
                      commands=["+@all"])  # fmt: skip
    address: dict[str, Any] = {
        "host": "127.0.0.1", "port": server.port, "username": "rotating", "password": "old-pw"
    }  # fmt: skip

    def change_password_and_drop_connections() -> None:
        admin.acl_setuser("rotating", passwords=["-old-pw", "+new-pw"])
        admin.client_kill_filter(_type="normal", skipme=True)
        admin.config_resetstat()

    def sync() -> None:
        client = redis.Redis(**address, retry=Retry(NoBackoff(), 3))
        history = RedisHistory(client, "c", namespace="tenant-a")
        history.append(Message.user("hi"))  # the store now keeps its connection
        change_password_and_drop_connections()
        try:
            history.append(Message.user("again"))
        finally:
            client.close()

    async def asynchronous() -> None:
        client = redis.asyncio.Redis(**address, retry=AsyncRetry(NoBackoff(), 3))
        history = AsyncRedisHistory(client, "c", namespace="tenant-a")
        await history.append(Message.user("hi"))
        change_password_and_drop_connections()
        try:
            await history.append(Message.user("again"))
        finally:
            await client.aclose()

    try:
        with pytest.raises(AccessDeniedError):
            sync() if flavour == "sync" else asyncio.run(asynchronous())
        assert handshakes(admin) == 1
    finally:
        admin.acl_deluser("rotating")


# -- the worker ------------------------------------------------------------------------------


@pytest.fixture
def no_worker_settings() -> Iterator[None]:
    """An in-process worker's settings do not outlive its test."""
    yield
    configure_worker(None)


def test_a_worker_whose_queue_refuses_it_stops_with_access_denied(
    server: RedisServer, no_worker_settings: None
) -> None:
    """A worker started with the wrong password for its queue raises AccessDeniedError."""
    settings = WorkerSettings(url=url(server, ":wrong-pw"), token_counter="heuristic")
    with pytest.raises(AccessDeniedError):
        run_worker(settings, burst=True, worker_class=InProcessWorker)


@pytest.mark.parametrize(
    ("credentials", "namespace"),
    [(":wrong-pw", "tenant-a"), ("tenant-a:a-pw", "tenant-b")],
    ids=["wrong-password", "another-tenant"],
)
def test_a_job_the_store_refuses_fails_with_access_denied(  # noqa: PLR0917  (fixtures)
    server: RedisServer,
    admin: redis.Redis,
    real_redis: redis.Redis,
    redis_url: str,
    no_worker_settings: None,
    credentials: str,
    namespace: str,
) -> None:
    """A job on a store that refuses the worker's password, or on a conversation its ACL user
    may not touch, fails with AccessDeniedError; the worker goes on to the next job."""
    RedisHistory(admin, "c", namespace=namespace).append_many(turns(6))
    admin.config_resetstat()
    queue = compaction_queue(real_redis, "redis-history")
    policy = CompactionPolicy(soft_tokens=50, hard_tokens=10_000, keep_last_turns=1)
    payload = {"namespace": namespace, "conversation_id": "c", "prefix": "rh"}
    jobs = [
        queue.enqueue_call(
            COMPACTION_FUNCTION, kwargs={**payload, "policy": policy.model_dump(mode="json")}
        )
        for _ in range(2)
    ]
    settings = WorkerSettings(
        url=url(server, credentials), queue_url=redis_url, token_counter="heuristic"
    )
    run_worker(settings, burst=True, worker_class=InProcessWorker)
    for job in jobs:
        fetched = Job.fetch(job.id, connection=real_redis, serializer=JSONSerializer)
        assert fetched.get_status() == JobStatus.FAILED
        result = fetched.latest_result()
        assert result is not None
        assert "AccessDeniedError" in str(result.exc_string)
    assert len(RedisHistory(admin, "c", namespace=namespace)) == 25, "nothing was compacted"
