"""Forgetting a user: every memory of an owner, and every key naming it, removed by
``forget_owner`` and by ``redis-history memory forget``, proven by scanning the namespace
on real Redis."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from commands import cli

from redis_history.demo.server import RedisServer
from redis_history.memory import AsyncRedisLongTermMemory, MemoryFilters, RedisLongTermMemory
from redis_history.memory.embedders import HashingEmbedder

pytestmark = pytest.mark.real_redis


def fill(memory: RedisLongTermMemory, agent: str, user: str, n: int = 30) -> list[str]:
    """``n`` memories of (agent, user), with tags, conversations and vectors."""
    owner = {"agent_id": agent, "user_id": user}
    items = [
        (
            {
                "agent_id": agent,
                "user_id": user,
                "tags": [f"t{i % 3}"],
                "conversation_id": f"c{i % 4}",
            }
        )
        if i % 2
        else owner
        for i in range(n)
    ]
    return memory.store_many(
        [(f"fact {i} about topic {i % 5} of {user}", m) for i, m in enumerate(items)]
    )


def naming(client: redis.Redis, agent: str, user: str) -> list[bytes]:
    """Every key of the server whose owner is (agent, user)."""
    return sorted(client.scan_iter(match=f"*{{{agent}:{user}}}*"))


def test_forget_owner_removes_every_key_of_the_owner_and_nothing_else(
    real_redis: redis.Redis,
) -> None:
    memory = RedisLongTermMemory(real_redis, embedder=HashingEmbedder())
    fill(memory, "a", "u")
    fill(memory, "a", "v")
    fill(memory, "b", "u")
    before = {owner: naming(real_redis, *owner) for owner in [("a", "v"), ("b", "u")]}
    assert len(naming(real_redis, "a", "u")) > 10
    assert memory.forget_owner("a", "u") == 30
    assert naming(real_redis, "a", "u") == []
    assert {owner: naming(real_redis, *owner) for owner in before} == before
    who = MemoryFilters("a", "u")
    assert memory.recall("topic 3", who, 5) == []
    assert memory.list(who) == []
    assert memory.forget_owner("a", "u") == 0
    assert [r.text for r in memory.recall("topic 3", MemoryFilters("a", "v"), 1)]
    (again,) = memory.store_many([("a new fact", {"agent_id": "a", "user_id": "u"})])
    assert [r.memory_id for r in memory.recall("fact", who, 5)] == [again]


def test_forget_owner_is_the_same_on_asyncio(redis_server: RedisServer) -> None:
    client = redis_server.client()
    client.flushall()
    fill(RedisLongTermMemory(client), "a", "u", 5)

    async def forget() -> int:
        async_client = redis.asyncio.Redis.from_url(redis_server.url)
        try:
            return await AsyncRedisLongTermMemory(async_client).forget_owner("a", "u")
        finally:
            await async_client.aclose()

    assert asyncio.run(forget()) == 5
    assert naming(client, "a", "u") == []


def test_the_command_forgets_a_user_under_every_agent_and_sweeps_what_is_left(
    redis_server: RedisServer,
) -> None:
    """``redis-history memory forget --user u``: every owner of u in the namespace goes, a key
    a racing store left (its record gone) is swept, no other user or namespace is touched,
    and no key of the namespace names u as an owner afterwards."""
    client = redis_server.client()
    client.flushall()
    memory = RedisLongTermMemory(client, namespace="t", embedder=HashingEmbedder())
    fill(memory, "a", "u")
    fill(memory, "b", "u", 3)
    fill(memory, "a", "v")
    fill(memory, "a", "x:u", 2)  # a user whose id ends in ":u": not u
    fill(RedisLongTermMemory(client, namespace="other"), "a", "u", 2)
    orphan = memory.keys("b", "u").term("zzz")
    client.hset(orphan, "99", "1001")
    where = ("--redis-url", redis_server.url, "--namespace", "t")
    refused = cli("memory", "forget", *where, "--user", "u")
    assert refused.returncode != 0
    assert "pass --yes" in refused.stderr
    done = cli("memory", "forget", *where, "--user", "u", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["a/u  30  0", "b/u  3  1"]
    assert "33 memories forgotten, 2 owners" in done.stderr
    left = [k.decode() for k in client.scan_iter(match="rh:t:*")]
    assert not [k for k in left if ":u}" in k and ":x:u}" not in k], left
    assert naming(client, "a", "v")
    assert naming(client, "a", "x:u")
    assert client.exists("rh:other:mem:{a:u}:docs")
    one = cli("memory", "forget", *where, "--user", "v", "--agent", "a", "--yes")
    assert one.stdout.splitlines() == ["a/v  30  0"]
    assert naming(client, "a", "v") == []


def test_the_command_lists_an_owners_memories_with_their_provenance(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    client.flushall()
    memory = RedisLongTermMemory(client, namespace="t", clock=lambda: 1_764_000_000_000)
    owner = {"agent_id": "a", "user_id": "u"}
    memory.store("Prefers green tea", {**owner, "conversation_id": "c1", "message_ids": ["m1"]})
    memory.store("Lives in\x1b[2J Porto", owner)
    where = ("--redis-url", redis_server.url, "--namespace", "t")
    done = cli("memory", "ls", *where, "--agent", "a", "--user", "u")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2  2025-11-24T16:00:00+00:00  -  -  Lives in\\x1b[2J Porto",
        "1  2025-11-24T16:00:00+00:00  c1  m1  Prefers green tea",
    ]
    assert "2 memories" in done.stderr
    assert cli("memory", "ls", *where, "--agent", "a", "--limit", "0").returncode == 2
    memory.supersede("1", "Prefers black tea", owner)
    past = cli("memory", "ls", *where, "--agent", "a", "--user", "u", "--superseded")
    assert past.stdout.splitlines() == [
        "1  2025-11-24T16:00:00+00:00  c1  m1  Prefers green tea  -> 3"
    ]
    assert "1 superseded memories" in past.stderr
