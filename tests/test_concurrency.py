"""Many processes on one conversation of a real Redis: nothing lost, nothing reordered."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.synchronize import Event
from typing import Any

import pytest
import redis
from samples import STAGED_TEXT

from redis_history import (
    CompactionPolicy,
    CompactionState,
    InvalidTransitionError,
    Message,
    RedisHistory,
    StaleSnapshotError,
    ToolCall,
    ToolPairingError,
)
from redis_history.compaction.jobs import compaction_queue
from redis_history.store.codec import decode_entries

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]

WRITERS = 8
PER_WRITER = 500
CONTEXT = multiprocessing.get_context("fork")


def append_one_by_one(url: str, writer: int, start: Event) -> None:
    history = RedisHistory.from_url(url, "shared", validate=False, token_counter="heuristic")
    start.wait()
    for n in range(PER_WRITER):
        history.append(Message.user(f"w{writer} n{n}", id=f"w{writer}-{n:04d}"))


def append_turns(url: str, writer: int, start: Event) -> None:
    history = RedisHistory.from_url(url, "shared", token_counter="heuristic")
    start.wait()
    for n in range(0, PER_WRITER, 2):
        history.append_many(
            [
                Message.user(f"w{writer} q{n}", id=f"w{writer}-{n:04d}"),
                Message.assistant(f"w{writer} a{n}", id=f"w{writer}-{n + 1:04d}"),
            ]
        )


STAGED_TURNS = 60
LARGE = STAGED_TEXT
"""A tool result whose turn is staged (over ``_core.STAGE_BYTES``)."""


def append_staged_turns(url: str, writer: int, start: Event) -> None:
    history = RedisHistory.from_url(url, "shared", token_counter="heuristic")
    start.wait()
    for n in range(STAGED_TURNS):
        history.append_many(
            [
                Message.user(f"w{writer} q{n}", id=f"w{writer}-{n:03d}-u"),
                Message.assistant(
                    "",
                    tool_calls=[ToolCall(id=f"w{writer}-{n}", name="f")],
                    id=f"w{writer}-{n:03d}-a",
                ),
                Message.tool(LARGE, tool_call_id=f"w{writer}-{n}", id=f"w{writer}-{n:03d}-t"),
                Message.assistant(f"w{writer} a{n}", id=f"w{writer}-{n:03d}-b"),
            ]
        )


def splice_repeatedly(url: str, start: Event, done: Event) -> None:
    history = RedisHistory.from_url(url, "shared", token_counter="heuristic")
    start.wait()
    while not done.is_set():
        prefix = history.range(0, 40)
        if len(prefix) < 40:
            continue
        try:
            history.splice_prefix(
                len(prefix), Message.system("summary"), expected_ids=[m.id for m in prefix]
            )
        except (StaleSnapshotError, ToolPairingError):  # moved on, or a cut inside a turn
            continue


def append_while_splicing(append: Callable[[str, int, Event], None], url: str) -> RedisHistory:
    """WRITERS processes running ``append(url, writer, start)`` while another splices the
    head until they are done, released together; the shared conversation afterwards."""
    start, done = CONTEXT.Event(), CONTEXT.Event()
    writers = [CONTEXT.Process(target=append, args=(url, w, start)) for w in range(WRITERS)]
    splicer = CONTEXT.Process(target=splice_repeatedly, args=(url, start, done))
    for process in [*writers, splicer]:
        process.start()
    start.set()
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    done.set()
    splicer.join(60)
    assert splicer.exitcode == 0
    return RedisHistory.from_url(url, "shared", token_counter="heuristic")


def check_per_writer_order(ids: list[str]) -> None:
    """Every writer's ids appear exactly once each, in the order it wrote them."""
    assert len(ids) == len(set(ids)) == WRITERS * PER_WRITER
    for w in range(WRITERS):
        mine = [i for i in ids if i.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{n:04d}" for n in range(PER_WRITER)]


def test_concurrent_appends_all_land_in_writer_order(redis_url: str, real_redis: object) -> None:
    """8 processes x 500 appends: exactly 4000 messages, each writer's in its own order."""
    start = CONTEXT.Event()
    writers = [
        CONTEXT.Process(target=append_one_by_one, args=(redis_url, w, start))
        for w in range(WRITERS)
    ]
    for process in writers:
        process.start()
    start.set()
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    history = RedisHistory.from_url(redis_url, "shared", token_counter="heuristic")
    assert len(history) == WRITERS * PER_WRITER
    check_per_writer_order([m.id for m in history.snapshot()])
    assert history.token_estimate() == sum(e.tokens for e in history.entries())


def test_staged_turns_racing_splices_all_land_whole_and_in_order(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """8 processes appending turns large enough to be staged (MULTI, the script renaming the
    list, RPUSHX, RENAME back) while another splices the head: every turn lands once, whole
    and in its writer's order, nothing is left in the stage key, and the token total holds."""
    real_redis.config_resetstat()
    history = append_while_splicing(append_staged_turns, redis_url)
    ids = [m.id for m in history.transcript()]
    assert len(ids) == len(set(ids)) == WRITERS * STAGED_TURNS * 4
    for w in range(WRITERS):
        mine = [i for i in ids if i.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{n:03d}-{k}" for n in range(STAGED_TURNS) for k in "uatb"]
    entries = history.entries()
    live = [e.message.id for e in entries if not e.summary]
    assert all(
        live[i].startswith(live[i + 1][:-1]) for i in range(len(live) - 1) if live[i][-1] in "ua"
    )
    assert any(e.summary for e in entries), "the splicer never managed a splice"
    assert not real_redis.exists(history.keys.stage)
    assert history.token_estimate() == sum(e.tokens for e in entries)
    staged = real_redis.info("commandstats")["cmdstat_exec"]["calls"]
    assert staged >= WRITERS * STAGED_TURNS - 1  # all but a turn on the empty list


def test_splicing_while_appending_loses_nothing(redis_url: str, real_redis: redis.Redis) -> None:
    """Appenders racing repeated splices: every id is in the list or archive exactly once."""
    history = append_while_splicing(append_turns, redis_url)
    entries = history.entries()
    summaries = [e for e in entries if e.summary]
    assert summaries, "the splicer never managed a splice"
    check_per_writer_order([m.id for m in history.transcript()])
    live = {e.message.id for e in entries if not e.summary}
    archived = decode_entries(real_redis.lrange(history.keys.archive, 0, -1))
    assert not live & {e.message.id for e in archived if not e.summary}
    assert history.token_estimate() == sum(e.tokens for e in entries)


TURNS_PER_POD = 200


def race(target: Callable[[str, Event, Any], None], url: str) -> list[Any]:
    """Start WRITERS processes running ``target(url, start, out)`` behind one event, release
    them together, and return what each put on ``out``."""
    start, out = CONTEXT.Event(), CONTEXT.Queue()
    pods = [CONTEXT.Process(target=target, args=(url, start, out)) for _ in range(WRITERS)]
    for pod in pods:
        pod.start()
    start.set()
    answers = [out.get(timeout=120) for _ in pods]
    for pod in pods:
        pod.join()
        assert pod.exitcode == 0
    return answers


def advance_turns(url: str, start: Event, out: multiprocessing.Queue[list[int]]) -> None:
    history = RedisHistory.from_url(url, "shared")
    start.wait()
    out.put([history.advance_turn().cooldown_remaining() for _ in range(TURNS_PER_POD)])


def test_racing_state_transitions_are_serialized(redis_url: str, real_redis: redis.Redis) -> None:
    """Pods racing advance_turn on one conversation each see a distinct Cooling count, and
    the final count is exact: no transition is lost or applied on a stale read."""
    history = RedisHistory(real_redis, "shared")
    history.append(Message.user("hello"))
    cooldown = WRITERS * TURNS_PER_POD + 5
    history.compaction_event("compacted", cooldown)
    seen = [n for counts in race(advance_turns, redis_url) for n in counts]
    # CompactedThisTurn{c} -> Cooling{c} -> Cooling{c-1} ...: every count once.
    assert sorted(seen, reverse=True) == list(range(cooldown, cooldown - len(seen), -1))
    assert history.compaction_state() == CompactionState.cooling(cooldown - len(seen) + 1)


DUE = CompactionPolicy(soft_tokens=1, hard_tokens=10)


def ask_to_compact(url: str, start: Event, out: multiprocessing.Queue[bool]) -> None:
    client = redis.Redis.from_url(url)
    history = RedisHistory(client, "shared", token_counter="heuristic")
    queue = compaction_queue(connection=client, name="compaction")
    start.wait()
    out.put(history.maybe_compact(queue, DUE))
    client.close()


def test_pods_asking_at_once_enqueue_one_compaction(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """However many pods call maybe_compact at the same moment, exactly one job is enqueued."""
    shared = RedisHistory(real_redis, "shared", token_counter="heuristic")
    for i in range(5):  # more than min_messages + keep_last_turns: a cut may exist
        shared.append_many([Message.user(f"long {i}"), Message.assistant(f"answer {i}")])
    assert race(ask_to_compact, redis_url).count(True) == 1
    assert compaction_queue(connection=real_redis, name="compaction").count == 1


def take_the_warning(url: str, start: Event, out: multiprocessing.Queue[bool]) -> None:
    history = RedisHistory.from_url(url, "shared")
    start.wait()
    try:
        history.compaction_event("warned")
    except InvalidTransitionError:
        out.put(False)
    else:
        out.put(True)


def test_the_exhaustion_warning_is_taken_once(redis_url: str, real_redis: redis.Redis) -> None:
    """Of pods racing to give the one-shot exhaustion warning, exactly one wins."""
    history = RedisHistory(real_redis, "shared")
    history.append(Message.user("hello"))
    history.compaction_event("exhausted")
    assert race(take_the_warning, redis_url).count(True) == 1
