"""A pod's OpenTelemetry counters: recorded by both front ends once the application sets a
meter provider, and nothing at all (not even an import) without one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis
from opentelemetry import metrics as otel
from opentelemetry.metrics import _internal as otel_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.util._once import Once
from samples import turns

from redis_history import (
    AsyncRedisHistory,
    CompactionPolicy,
    HistoryError,
    Message,
    RedisHistory,
)
from redis_history.store import metrics as store_metrics

Readings = dict[tuple[str, frozenset[tuple[str, Any]]], float]


def reset_globals() -> None:
    """Forget the process's meter provider and the store's instruments, as
    opentelemetry-test-utils' ``reset_metrics_globals`` does: OpenTelemetry lets a process
    set its provider once, and another test (the docs' example) may have set one."""
    otel_internal._METER_PROVIDER_SET_ONCE = Once()
    otel_internal._METER_PROVIDER = None
    store_metrics._state.clear()


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """An in-memory reader of a global SDK meter provider, set as an application would."""
    reset_globals()
    found = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[found])
    otel.set_meter_provider(provider)
    yield found
    reset_globals()
    provider.shutdown()


def readings(reader: InMemoryMetricReader) -> Readings:
    """Every ``redis_history.*`` point: a counter's sum, a histogram's count."""
    found: Readings = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if not metric.name.startswith("redis_history."):
                    continue
                for point in metric.data.data_points:
                    key = (metric.name, frozenset((point.attributes or {}).items()))
                    value = point.value if isinstance(point, NumberDataPoint) else point.count
                    found[key] = float(value)
    return found


def counted(reader: InMemoryMetricReader, script: Callable[[], None]) -> Readings:
    """What running ``script`` added to each point (cumulative points, so a difference)."""
    before = readings(reader)
    script()
    after = readings(reader)
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def expected() -> Readings:
    """What :func:`scripted` and :func:`scripted_async` record."""

    def key(name: str, **attributes: str) -> tuple[str, frozenset[tuple[str, Any]]]:
        return (name, frozenset(attributes.items()))

    return {
        key("redis_history.appends"): float(len(turns(6)) + 2),  # in messages
        key("redis_history.append.replays"): 1.0,
        key("redis_history.write.duration", operation="append"): 4.0,
        key("redis_history.append.refusals", kind="RoleOrderError"): 1.0,
        key("redis_history.append.refusals", kind="ToolPairingError"): 1.0,
        key("redis_history.append.refusals", kind="MessageTooLargeError"): 1.0,
        key("redis_history.write.duration", operation="replace"): 1.0,
        key("redis_history.snapshot.duration"): 3.0,
        key("redis_history.compactions.enqueued"): 1.0,
    }


POLICY = CompactionPolicy(soft_tokens=50, hard_tokens=10_000, min_messages=2)
TOO_LARGE = Message.user("x" * 2_000)
SYSTEM = Message.system("be brief", id="system-1")


def refuse(call: Callable[[], object]) -> None:
    """Run a call the store must refuse."""
    with pytest.raises(HistoryError):
        call()


def scripted(history: RedisHistory) -> None:
    """Three appends and a retry of the first (a replay), three refusals, a replace, three
    reads, and one compaction scheduled (a second ``maybe_compact`` finds it pending)."""
    history.append(SYSTEM)
    history.append(SYSTEM)
    history.append_many(turns(6)[1:])
    history.append_many([Message.user("one more"), Message.assistant("sure")])
    refuse(lambda: history.append(Message.system("late")))
    refuse(lambda: history.append(Message.tool("r", tool_call_id="zz")))
    refuse(lambda: history.append(TOO_LARGE))
    history.replace(history.snapshot())
    history.snapshot_openai()
    history.snapshot()
    jobs: list[object] = []
    assert history.maybe_compact(jobs.append, POLICY)
    assert not history.maybe_compact(jobs.append, POLICY)


async def scripted_async(history: AsyncRedisHistory) -> None:
    """:func:`scripted` through the asyncio front end."""
    await history.append(SYSTEM)
    await history.append(SYSTEM)
    await history.append_many(turns(6)[1:])
    await history.append_many([Message.user("one more"), Message.assistant("sure")])
    for message in (Message.system("late"), Message.tool("r", tool_call_id="zz"), TOO_LARGE):
        with pytest.raises(HistoryError):
            await history.append(message)
    await history.replace(await history.snapshot())
    await history.snapshot_openai()
    await history.snapshot()
    jobs: list[object] = []
    assert await history.maybe_compact(jobs.append, POLICY)
    assert not await history.maybe_compact(jobs.append, POLICY)


@pytest.fixture
def server() -> fakeredis.FakeServer:
    """A fresh fake server."""
    return fakeredis.FakeServer()


def test_the_sync_front_end_counts_its_calls(reader: InMemoryMetricReader, client: Any) -> None:
    """Appends (in messages), replays, refusals by kind, write and snapshot latencies, and
    scheduled compactions, for a scripted sequence of calls."""
    history = RedisHistory(client, "c", token_counter="heuristic", max_message_bytes=1024)
    assert counted(reader, lambda: scripted(history)) == expected()


def test_a_replayed_staged_append_is_counted_as_a_replay(
    reader: InMemoryMetricReader, client: Any
) -> None:
    """A retried append of a large message (its envelope pushed outside the script) is a
    replay too: one message appended, one replay."""
    history = RedisHistory(client, "big", token_counter="heuristic")
    big = Message.user("y" * 8_000, id="big-1")

    def twice() -> None:
        history.append(big)
        history.append(big)  # as redis-py resends it after a lost reply

    assert counted(reader, twice) == {
        ("redis_history.appends", frozenset()): 1.0,
        ("redis_history.append.replays", frozenset()): 1.0,
        ("redis_history.write.duration", frozenset({("operation", "append")})): 2.0,
    }
    assert len(history) == 1


def test_the_async_front_end_counts_the_same(
    reader: InMemoryMetricReader, server: fakeredis.FakeServer
) -> None:
    """The asyncio front end records exactly what the sync one does for the same calls."""
    client = fakeredis.FakeAsyncRedis(server=server)
    history = AsyncRedisHistory(client, "c", token_counter="heuristic", max_message_bytes=1024)
    assert counted(reader, lambda: asyncio.run(scripted_async(history))) == expected()


WITHOUT = """
import sys
{block}
import redis
from redis_history import Message, RedisHistory
history = RedisHistory(redis.Redis.from_url(sys.argv[1]), "c", token_counter="heuristic")
history.append(Message.user("hi"))
assert len(history.snapshot()) == 1
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
BLOCK = """
class NoOtel:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError(name)
sys.meta_path.insert(0, NoOtel())
"""


@pytest.mark.real_redis
@pytest.mark.parametrize(("block", "loaded"), [("", True), (BLOCK, False)], ids=["api", "none"])
def test_without_a_provider_or_without_the_api_calls_work_and_record_nothing(
    block: str, loaded: bool, redis_url: str, real_redis: redis.Redis
) -> None:
    """Without a meter provider the API's proxies drop every call; without the API installed
    the history works the same, and nothing of OpenTelemetry is imported."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT.format(block=block), redis_url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert ("'opentelemetry.metrics'" in done.stdout) is loaded, done.stdout
