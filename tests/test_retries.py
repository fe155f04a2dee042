"""Exactly once under lost replies: a write the server applied but whose reply never reached the
client is retried (by redis-py, or by the caller) and applied once, answering as the first did.

A :class:`~faults.FaultProxy` in front of a real ``redis-server`` (one per node of a local
cluster) forwards the write and drops its reply. Each write runs twice, on two conversations
with the same starting state: once with the fault, once without; everything observable about
the two conversations, and the results, must be the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
from backends import SyncOverAsync
from faults import ClusterProxies, FaultProxy
from redis.backoff import NoBackoff
from redis.retry import Retry
from samples import turns

from redis_history import (
    AsyncRedisHistory,
    CompactionPolicy,
    Message,
    RedisHistory,
    StoreUnavailableError,
    ToolCall,
)
from redis_history.compaction.jobs import compaction_queue
from redis_history.wire.scripts import script, script_names

pytestmark = pytest.mark.real_redis

SEED = turns(3)
NEXT = Message.user("next question", id="m-next")
TURN = [
    Message.user("weather?", id="m-u"),
    Message.assistant("", tool_calls=[ToolCall(id="w1", name="weather")], id="m-a"),
    Message.tool('{"temp_c": 21}', tool_call_id="w1", id="m-t"),
    Message.assistant("21 °C", id="m-b"),
]
SUMMARY = Message.system("summary of the first turn", id="m-s")
IDS = [m.id for m in SEED]

Write = Callable[[Any, "str | None"], Any]

WRITES: dict[str, Write] = {
    "append": lambda h, op: h.append(NEXT),
    "append_many": lambda h, op: h.append_many(TURN),
    "replace": lambda h, op: h.replace(TURN, op_id=op),
    "replace_fenced": lambda h, op: h.replace(TURN, expected_ids=IDS, op_id=op),
    "splice_prefix": lambda h, op: h.splice_prefix(5, SUMMARY),
    "splice_prefix_fenced": lambda h, op: h.splice_prefix(5, SUMMARY, expected_ids=IDS[:5]),
    "truncate": lambda h, op: h.truncate(9, op_id=op),
    "rollback": lambda h, op: h.rollback(IDS[-4:], op_id=op),
    "record_input_tokens": lambda h, op: h.record_input_tokens(500, op_id=op),
    "advance_turn": lambda h, op: h.advance_turn(op_id=op),
    "compaction_event": lambda h, op: h.compaction_event("compacted", 3, 70, op_id=op),
    "set_ttl": lambda h, op: h.set_ttl(600),
}


def seed(history: Any) -> None:
    """The same starting state for every conversation: three turns, a baseline, Cooling{2}."""
    history.append_many(SEED)
    history.record_input_tokens(100)
    history.compaction_event("compacted", 2)
    history.advance_turn()


def observe(history: Any) -> tuple[Any, ...]:
    """Everything a caller can see of a conversation."""
    return (
        history.entries(),
        history.token_estimate(),
        history.transcript(),
        history.compaction_state(),
        history.compaction_stats(),
        history.ttl(),
    )


class Target:
    """Histories through the proxies (faulted) and direct (the reference), on one backend."""

    def __init__(self, through: Callable[[str], Any], direct: Callable[[str], Any]) -> None:
        self.through, self.direct = through, direct


@pytest.fixture(params=["redis", "redis-async", "cluster", "cluster-async"])
def target(
    request: pytest.FixtureRequest, redis_server: Any, real_redis: redis.Redis
) -> Iterator[tuple[Target, Callable[[str], FaultProxy]]]:
    """Faulted and reference histories on one backend, and how to arm the fault for a key.

    Every script is loaded beforehand, so the dropped reply is the one of an applied script,
    not a NOSCRIPT refusal.
    """
    runner = asyncio.Runner()
    closers: list[Callable[[], Any]] = []
    kind: str = request.param
    try:
        if kind.startswith("redis"):
            proxy: FaultProxy = request.getfixturevalue("fault_proxy")
            for name in script_names():
                real_redis.script_load(script(name).source)
            if kind == "redis":
                faulted: Any = redis.Redis(host=proxy.host, port=proxy.port)
                closers.append(faulted.close)
                target = Target(
                    lambda c: RedisHistory(faulted, c), lambda c: RedisHistory(real_redis, c)
                )
            else:
                afaulted = redis.asyncio.Redis(host=proxy.host, port=proxy.port)
                closers.append(lambda: runner.run(afaulted.aclose()))
                target = Target(
                    lambda c: SyncOverAsync(AsyncRedisHistory(afaulted, c), runner),
                    lambda c: RedisHistory(real_redis, c),
                )

            def arm(key: str) -> FaultProxy:
                proxy.drop_reply(b"EVALSHA")
                return proxy

        else:
            proxies: ClusterProxies = request.getfixturevalue("cluster_proxies")
            direct = request.getfixturevalue("cluster_client")
            for name in script_names():
                direct.script_load(script(name).source)
            if kind == "cluster":
                cfaulted: Any = proxies.client()
                closers.append(cfaulted.close)
                target = Target(
                    lambda c: RedisHistory(cfaulted, c), lambda c: RedisHistory(direct, c)
                )
            else:
                acfaulted = runner.run(proxies.async_client())
                closers.append(lambda: runner.run(acfaulted.aclose()))
                target = Target(
                    lambda c: SyncOverAsync(AsyncRedisHistory(acfaulted, c), runner),
                    lambda c: RedisHistory(direct, c),
                )

            def arm(key: str) -> FaultProxy:
                return proxies.drop_reply(key, b"EVALSHA")

        yield target, arm
    finally:
        for close in closers:
            close()
        runner.close()


@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_whose_reply_is_lost_is_applied_once(
    target: tuple[Target, Callable[[str], FaultProxy]], name: str
) -> None:
    """redis-py re-sends a write whose reply was lost after the server applied it; the
    conversation ends exactly as if the reply had arrived, and the call returns the same."""
    histories, arm = target
    write = WRITES[name]
    reference, faulted = histories.direct("reference"), histories.through("faulted")
    seed(reference)
    seed(faulted)
    expected = write(reference, None)
    proxy = arm(faulted.keys.msgs)
    assert write(faulted, None) == expected
    assert proxy.dropped == 1, "the fault did not fire"
    assert observe(histories.direct("faulted")) == observe(reference)


AGAIN: dict[str, list[Callable[[Any], Any]]] = {
    "at once": [lambda h: h.append_many(TURN)],
    "in pieces": [
        lambda h: h.append(TURN[0]),
        lambda h: h.append_many(TURN[1:3]),
        lambda h: h.append(TURN[3]),
    ],
}
"""A turn's appends: the turn whole, or as an agent loop appends it."""


@pytest.mark.parametrize("again", list(AGAIN))
def test_a_rolled_back_turn_appended_again_is_applied_once_when_replies_are_lost(
    target: tuple[Target, Callable[[str], FaultProxy]], again: str
) -> None:
    """A turn rolled back and appended again with the same messages, the reply of each of
    its appends lost: each is re-sent by redis-py and applied once, so the turn is there
    once, as if the replies had arrived."""
    histories, arm = target
    reference, faulted = histories.direct("reference"), histories.through("faulted")
    appends = AGAIN[again]
    for history in (reference, faulted):
        seed(history)
        for append in appends:
            append(history)
        history.rollback(TURN)
    for append in appends:
        append(reference)
    for attempt, append in enumerate(appends, 1):
        proxy = arm(faulted.keys.msgs)
        append(faulted)
        assert proxy.dropped == attempt, "the fault did not fire"
    assert histories.direct("faulted").snapshot() == [*SEED, *TURN]
    assert observe(histories.direct("faulted")) == observe(reference)


@pytest.fixture(params=["sync", "async"])
def no_retry(
    request: pytest.FixtureRequest, fault_proxy: FaultProxy, real_redis: redis.Redis
) -> Iterator[Callable[[str], Any]]:
    """Histories on clients that never retry (what ``Redis.from_url`` gives by default)."""
    for name in script_names():
        real_redis.script_load(script(name).source)
    retry = Retry(NoBackoff(), 0)
    if request.param == "sync":
        client = redis.Redis(host=fault_proxy.host, port=fault_proxy.port, retry=retry)
        yield lambda c: RedisHistory(client, c)
        client.close()
    else:
        runner = asyncio.Runner()
        aretry = redis.asyncio.retry.Retry(NoBackoff(), 0)
        aclient = redis.asyncio.Redis(host=fault_proxy.host, port=fault_proxy.port, retry=aretry)
        yield lambda c: SyncOverAsync(AsyncRedisHistory(aclient, c), runner)
        runner.run(aclient.aclose())
        runner.close()


@pytest.mark.parametrize("name", list(WRITES))
def test_a_caller_repeating_a_write_after_a_lost_reply_applies_it_once(
    no_retry: Callable[[str], Any],
    fault_proxy: FaultProxy,
    real_redis: redis.Redis,
    name: str,
) -> None:
    """Without redis-py retries the caller sees StoreUnavailableError; repeating the same call
    (the same messages, or the same op_id) is applied once and returns what the first did."""
    write = WRITES[name]
    reference, faulted = RedisHistory(real_redis, "reference"), no_retry("faulted")
    seed(reference)
    seed(faulted)
    expected = write(reference, "op-1")
    fault_proxy.drop_reply(b"EVALSHA")
    with pytest.raises(StoreUnavailableError):
        write(faulted, "op-1")
    assert fault_proxy.dropped == 1
    assert write(faulted, "op-1") == expected
    assert observe(RedisHistory(real_redis, "faulted")) == observe(reference)


def test_a_caller_repeating_an_append_again_after_a_lost_reply_applies_it_once(
    no_retry: Callable[[str], Any], fault_proxy: FaultProxy, real_redis: redis.Redis
) -> None:
    """A turn rolled back and appended again whose reply is lost, without redis-py retries:
    the caller's repeat after StoreUnavailableError is a replay, so the turn is there once."""
    history = no_retry("faulted")
    seed(history)
    history.append_many(TURN)
    history.rollback(TURN)
    fault_proxy.drop_reply(b"EVALSHA")
    with pytest.raises(StoreUnavailableError):
        history.append_many(TURN)
    assert fault_proxy.dropped == 1
    history.append_many(TURN)
    assert RedisHistory(real_redis, "faulted").snapshot() == [*SEED, *TURN]


def test_a_lost_claim_reply_still_enqueues_one_compaction(
    fault_proxy: FaultProxy, real_redis: redis.Redis
) -> None:
    """maybe_compact whose claim reply is lost gets the claim on the retry and enqueues the job
    (the claim is not left blocking compaction for its whole TTL)."""
    client = redis.Redis(host=fault_proxy.host, port=fault_proxy.port)
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(SEED)
    queue = compaction_queue(connection=real_redis, name="compaction")
    fault_proxy.drop_reply(b"EVALSHA")
    assert history.maybe_compact(queue, CompactionPolicy(soft_tokens=1, hard_tokens=2))
    assert fault_proxy.dropped == 1
    assert queue.count == 1
    client.close()


def test_a_lost_warning_reply_still_warns_once(
    fault_proxy: FaultProxy, real_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The one-shot exhaustion warning whose reply was lost is still given, by the pod that
    took it, and only once."""
    client = redis.Redis(host=fault_proxy.host, port=fault_proxy.port)
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(SEED)
    history.compaction_event("exhausted")
    queue = compaction_queue(connection=real_redis, name="compaction")
    fault_proxy.drop_reply(b"EVALSHA")
    with caplog.at_level("WARNING", logger="redis_history"):
        history.maybe_compact(queue, CompactionPolicy(soft_tokens=1, hard_tokens=2))
        history.maybe_compact(queue, CompactionPolicy(soft_tokens=1, hard_tokens=2))
    assert fault_proxy.dropped == 1
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "exhausted" in caplog.records[0].message
    client.close()


def test_a_lost_release_reply_answers_as_the_release_did(
    fault_proxy: FaultProxy, real_redis: redis.Redis
) -> None:
    """Releasing a claim whose reply was lost reports the release, not "it was not yours"."""
    client = redis.Redis(host=fault_proxy.host, port=fault_proxy.port)
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(SEED)
    assert history.execute(history.core.claim_compaction("job-1", 0, 60_000))
    fault_proxy.drop_reply(b"EVALSHA")
    assert history.release_compaction_claim("job-1") is True
    assert fault_proxy.dropped == 1
    assert not real_redis.hexists(history.keys.meta, "queued")
    client.close()
