"""How long a memory lives: superseded by the fact that updates it, expired by its time to
live, evicted by a capped owner (the least recently stored or recalled first); on real Redis,
a Redis Cluster and fakeredis, scanning for what each leaves behind."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from faults import FaultProxy

from redis_history.errors import LimitExceededError
from redis_history.memory import MemoryFilters, RedisLongTermMemory
from redis_history.memory.embedders import OfflineEmbedder
from redis_history.memory.redis_memory import MAX_SUPERSEDED
from redis_history.wire.scripts import script

WHO = MemoryFilters("travel", "u1")
OWNER = {"agent_id": "travel", "user_id": "u1"}


class Clock:
    """Milliseconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(scope="module")
def offline() -> OfflineEmbedder:
    return OfflineEmbedder()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.real_redis),
        pytest.param("cluster", marks=pytest.mark.real_redis),
    ]
)
def vector_client(request: pytest.FixtureRequest) -> Any:
    """A real Redis or a Redis Cluster, for memories with vectors (fakeredis has no type for
    a vector set, which the scripts check)."""
    return request.getfixturevalue("real_redis" if request.param == "redis" else "cluster_client")


def naming(client: Any, memory_id: str) -> list[str]:
    """The owner's keys that name memory ``memory_id`` (as a member or a field)."""
    keys = RedisLongTermMemory(client).keys("travel", "u1")
    found = []
    for raw in client.scan_iter(match=f"{keys.base}:*"):
        key = raw.decode()
        kind = client.type(key).decode()
        if (kind == "hash" and client.hexists(key, memory_id)) or (
            kind in ("set", "zset")
            and (
                client.sismember(key, memory_id)
                if kind == "set"
                else client.zscore(key, memory_id) is not None
            )
        ):
            found.append(key)
    return sorted(found)


# -- superseding ----------------------------------------------------------------------------


def test_an_updated_fact_supersedes_the_old_one_which_is_kept_but_never_recalled(
    vector_client: Any, offline: OfflineEmbedder, clock: Clock
) -> None:
    memory = RedisLongTermMemory(vector_client, embedder=offline, merge_similar=True, clock=clock)
    keys = memory.keys("travel", "u1")
    lisbon = memory.remember("Lives in Lisbon.", {**OWNER, "conversation_id": "c1"})
    assert lisbon.outcome == "added"
    memory.store("Prefers aisle seats.", OWNER)
    clock.now += 1000
    porto = memory.remember("Lives in Porto.", {**OWNER, "message_ids": ["m7"]})
    assert porto.outcome == "superseded"
    assert porto.superseded == (lisbon.memory_id,)
    for query in ("Where does the user live?", "Lisbon", "lives"):
        recalled = [r.text for r in memory.recall(query, WHO, 5)]
        assert "Lives in Lisbon." not in recalled
    assert [r.text for r in memory.recall("Where does the user live?", WHO, 1)] == [
        "Lives in Porto."
    ]
    assert [r.text for r in memory.list(WHO)] == ["Lives in Porto.", "Prefers aisle seats."]
    (old,) = memory.list(WHO, superseded=True)
    assert (old.text, old.memory_id) == ("Lives in Lisbon.", lisbon.memory_id)
    assert old.metadata["superseded_by"] == porto.memory_id
    assert old.metadata["superseded_ms"] == clock.now
    assert old.metadata["conversation_ids"] == ["c1"]
    # only its record and its place in `past` are left of it
    assert naming(vector_client, lisbon.memory_id) == sorted([keys.docs, keys.past])
    # a restatement of the new fact merges; a move back supersedes the new one in turn
    assert memory.remember("The user lives in Porto.", OWNER).outcome in ("merged", "added")
    back = memory.remember("Lives in Lisbon.", OWNER)
    assert back.outcome == "superseded"
    assert porto.memory_id in back.superseded
    assert back.memory_id != lisbon.memory_id  # a new memory: the old one stays as it was
    assert [r.text for r in memory.recall("Where does the user live?", WHO, 1)] == [
        "Lives in Lisbon."
    ]


def test_supersede_replaces_a_named_memory_and_forget_drops_a_superseded_one(
    sync_client: Any, clock: Clock
) -> None:
    memory = RedisLongTermMemory(sync_client, clock=clock)
    old = memory.store("Works at Initech as a tester.", OWNER)
    new = memory.supersede(old, "Works at Globex as a lead engineer.", OWNER)
    assert (new.outcome, new.superseded) == ("superseded", (old,))
    assert [r.text for r in memory.recall("works", WHO, 5)] == [
        "Works at Globex as a lead engineer."
    ]
    again = memory.supersede(old, "Works at Globex as a lead engineer.", OWNER)
    assert again == type(again)(new.memory_id, "merged")  # superseded already: left as it was
    assert [r.memory_id for r in memory.list(WHO, superseded=True)] == [old]
    assert memory.forget(old, WHO) is True
    assert memory.list(WHO, superseded=True) == []
    assert naming(sync_client, old) == []
    assert memory.forget(old, WHO) is False
    assert memory.supersede("42", "Likes tea.", OWNER).outcome == "added"  # no such memory


def test_a_supersede_whose_reply_was_lost_is_applied_once_and_reported(
    fault_proxy: FaultProxy, clock: Clock
) -> None:
    """The proxy loses the reply to the supersede after Redis applied it; redis-py sends it
    again: the old memory is superseded once, the counts are right, and the store says so."""
    with redis.Redis(host=fault_proxy.host, port=fault_proxy.port) as client:
        memory = RedisLongTermMemory(client, clock=clock)
        keys = memory.keys("travel", "u1")
        old = memory.store("Lives in Lisbon.", OWNER)
        client.script_load(script("memory_forget").source)  # a lost NOSCRIPT would prove nothing
        fault_proxy.drop_reply(f"EVALSHA\r\n$40\r\n{script('memory_forget').sha}".encode())
        new = memory.supersede(old, "Lives in Porto.", OWNER)
        assert fault_proxy.dropped == 1
        assert (new.outcome, new.superseded) == ("superseded", (old,))
        assert client.hget(keys.stats, "docs") == b"1"
        assert client.zrange(keys.past, 0, -1) == [old.encode()]
        assert [r.text for r in memory.list(WHO)] == ["Lives in Porto."]
        (past,) = memory.list(WHO, superseded=True)
        assert past.metadata["superseded_by"] == new.memory_id


def test_superseded_memories_are_kept_up_to_their_limit(
    real_redis: redis.Redis, clock: Clock
) -> None:
    memory = RedisLongTermMemory(real_redis, clock=clock)
    keys = memory.keys("travel", "u1")
    current = memory.store("Has 0 plants.", OWNER)
    first = current
    for i in range(1, MAX_SUPERSEDED + 2):
        clock.now += 1
        current = memory.supersede(current, f"Has {i} plants.", OWNER).memory_id
    assert real_redis.zcard(keys.past) == MAX_SUPERSEDED
    assert not real_redis.hexists(keys.docs, first)  # the oldest went
    assert real_redis.hlen(keys.docs) == MAX_SUPERSEDED + 1
    (latest,) = memory.list(WHO, limit=1, superseded=True)
    assert latest.metadata["superseded_by"] == current


# -- time to live -----------------------------------------------------------------------------


def test_an_expired_memory_is_never_recalled_and_the_next_store_removes_it(
    vector_client: Any, offline: OfflineEmbedder, clock: Clock
) -> None:
    memory = RedisLongTermMemory(vector_client, embedder=offline, ttl_seconds=60, clock=clock)
    keys = memory.keys("travel", "u1")
    short = memory.store("Is in Berlin this week.", {**OWNER, "ttl_seconds": 10})
    long = memory.store("Is allergic to peanuts.", OWNER)
    forever = memory.store("Was born in Lyon.", {**OWNER, "ttl_seconds": None})
    (record,) = [r for r in memory.list(WHO) if r.memory_id == short]
    assert record.metadata["expires_ms"] == clock.now + 10_000
    clock.now += 10_001
    for query in ("Berlin this week", "Where is the user now?"):
        assert short not in [r.memory_id for r in memory.recall(query, WHO, 5)]
    assert naming(vector_client, short)  # not removed yet: only never recalled
    memory.store("Likes trams.", OWNER)
    assert naming(vector_client, short) == []
    clock.now += 30_000
    memory.store("Is allergic to peanuts.", OWNER)  # a merge: its time starts again
    clock.now += 40_000
    assert {r.memory_id for r in memory.recall("peanuts", WHO, 5)} == {long, forever}
    assert memory.forget_expired("travel", "u1") == 1  # "Likes trams."
    assert {r.memory_id for r in memory.list(WHO)} == {long, forever}
    clock.now += 10**12
    assert [r.memory_id for r in memory.list(WHO)] == [forever]  # a list removes them first
    assert vector_client.zcard(keys.expires) == 0


def test_a_time_to_live_is_checked_before_anything_is_sent(sync_client: Any) -> None:
    with pytest.raises(ValueError, match="ttl_seconds"):
        RedisLongTermMemory(sync_client, ttl_seconds=0)
    memory = RedisLongTermMemory(sync_client)
    refused = [("10", TypeError), (True, TypeError), (-1, ValueError), (0, ValueError)]
    refused += [(1e12, ValueError), (float("nan"), ValueError), (float("inf"), ValueError)]
    for bad, error in refused:
        with pytest.raises(error, match="ttl_seconds"):
            memory.store("Likes tea.", {**OWNER, "ttl_seconds": bad})
    with pytest.raises(ValueError, match="expires_ms"):
        memory.store("Likes tea.", {**OWNER, "expires_ms": 5})
    assert list(sync_client.scan_iter()) == []


# -- the cap ---------------------------------------------------------------------------------


def test_a_capped_owner_evicts_the_least_recently_stored_or_recalled(
    sync_client: Any, clock: Clock
) -> None:
    memory = RedisLongTermMemory(sync_client, max_memories=3, clock=clock)
    ids = []
    for text in ("Likes tea.", "Owns a bike.", "Reads novels."):
        clock.now += 1
        ids.append(memory.store(text, OWNER))
    clock.now += 1
    assert [r.memory_id for r in memory.recall("tea", WHO, 1)] == [ids[0]]  # used now
    clock.now += 1
    fourth = memory.store("Plays chess.", OWNER)
    assert {r.memory_id for r in memory.list(WHO)} == {ids[0], ids[2], fourth}
    assert naming(sync_client, ids[1]) == []
    clock.now += 1
    memory.store("Reads novels.", OWNER)  # a merge: used now, nothing evicted
    clock.now += 1
    memory.store("Swims on Sundays.", OWNER)
    assert {r.text for r in memory.list(WHO)} == {
        "Reads novels.",
        "Plays chess.",
        "Swims on Sundays.",
    }
    uncapped = RedisLongTermMemory(sync_client, max_memories=None)
    assert uncapped.max_memories is None
    with pytest.raises(LimitExceededError):
        RedisLongTermMemory(sync_client, max_memories=10**9)


def test_a_forgotten_owner_leaves_no_key_of_its_lifetimes(
    real_redis: redis.Redis, clock: Clock
) -> None:
    memory = RedisLongTermMemory(real_redis, ttl_seconds=5, max_memories=10, clock=clock)
    old = memory.store("Lives in Lisbon.", OWNER)
    memory.supersede(old, "Lives in Porto.", OWNER)
    memory.recall("Porto", WHO, 1)
    assert memory.forget_owner("travel", "u1") == 2
    assert list(real_redis.scan_iter(match="*{travel:u1}*")) == []
