"""HistoryManager with ``history=``: summaries kept in the conversation's keys reach every
pod, each records the messages it covers, and pods completing one turn summarize it once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from summarizers_for_tests import Counting

from redis_history import LimitExceededError, Message, RedisHistory, limits
from redis_history.context import HistoryManager, HistoryManagerConfig, Strategy
from redis_history.demo.server import RedisServer
from redis_history.store._summaries import SummaryCore, span_digest

PROMPT = "You are a travel agent."
STRATEGIES: tuple[Strategy, ...] = ("sliding_window", "token_budget", "summary_and_tail")


def pod(
    client: Any,
    summarizer: Counting,
    strategy: Strategy = "token_budget",
    conversation: str = "conv-1",
    **options: Any,
) -> tuple[RedisHistory, HistoryManager]:
    """A pod's history and manager on the shared conversation."""
    history = RedisHistory(client, conversation, namespace="tenant-a")
    config = HistoryManagerConfig(
        strategy=strategy, enable_summarization=True, token_counter="o200k_base", **options
    )
    return history, HistoryManager(config, history=history).with_summarizer(summarizer)


def fill(history: RedisHistory, turns: int) -> None:
    history.append(Message.system(PROMPT))
    for i in range(turns):
        history.append_many([Message.user(f"question {i} " * 20), Message.assistant("ok " * 20)])


def turn_request(manager: HistoryManager, history: RedisHistory) -> Any:
    """The next turn's request, with room for about two turns of history."""
    return manager.prepare_messages(260, PROMPT, history.snapshot(), [Message.user("next?")])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_summary_one_pod_makes_is_in_the_next_request_of_another(
    sync_client: Any, strategy: Strategy
) -> None:
    """Pod A summarizes what its request left out; pod B's next request sends it, though B
    never summarized, and ``summaries()`` on either reads it."""
    summarizer = Counting()
    history_a, manager_a = pod(sync_client, summarizer, strategy, window_turns=3)
    history_b, manager_b = pod(sync_client, summarizer, strategy, window_turns=3)
    fill(history_a, 6)
    prepared = turn_request(manager_a, history_a)
    assert prepared.dropped
    summary = manager_a.on_turn_complete(prepared.dropped, "agent-1")
    assert summary is not None
    assert manager_b.summaries() == manager_a.summaries() == [summary]
    request = turn_request(manager_b, history_b)
    assert request.messages[0].content == f"{PROMPT}\n\n{summary}"
    assert request.diagnostics.summaries > 0
    assert manager_b.on_turn_complete(request.dropped, "agent-1") is None  # all covered
    assert summarizer.calls == [[m.id for m in prepared.dropped]]


def test_each_summary_records_the_run_it_covers(client: redis.Redis) -> None:
    """The stored summary names the run of messages it covers (its first id, its length, the
    digest of its ids), and the next summary covers only what was evicted since."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 5)
    first = turn_request(manager, history)
    manager.on_turn_complete(first.dropped, "agent-1")
    fill_more = [Message.user("question 5 " * 20), Message.assistant("ok " * 20)]
    history.append_many(fill_more)
    second = turn_request(manager, history)
    manager.on_turn_complete(second.dropped, "agent-1")
    stored = history.execute(SummaryCore(history.keys, "conv-1", "tenant-a").read())
    runs = [
        [m.id for m in first.dropped],
        [m.id for m in second.dropped if m not in first.dropped],
    ]
    assert [(s.first, s.count, s.digest) for s in stored] == [
        (run[0], len(run), span_digest(run)) for run in runs
    ]
    assert [s.text for s in stored] == manager.summaries()


def test_seeded_summaries_go_first_and_stay_in_the_process(client: redis.Redis) -> None:
    """``with_summaries`` seeds this manager's requests, before the shared summaries; other
    pods do not see the seeds."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    _, other = pod(client, summarizer)
    fill(history, 5)
    summary = manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    manager.with_summaries(["Seeded: the user is vegetarian."])
    request = turn_request(manager, history)
    assert request.messages[0].content == (
        f"{PROMPT}\n\nSeeded: the user is vegetarian.\n\n{summary}"
    )
    assert other.summaries() == [summary]


def test_without_history_the_summaries_stay_in_the_process(client: redis.Redis) -> None:
    """A manager given no history writes nothing to Redis."""
    summarizer = Counting()
    history, _ = pod(client, summarizer)
    fill(history, 5)
    config = HistoryManagerConfig(enable_summarization=True, token_counter="o200k_base")
    local = HistoryManager(config).with_summarizer(summarizer)
    summary = local.on_turn_complete(turn_request(local, history).dropped, "agent-1")
    assert local.summaries() == [summary]
    assert not client.exists(history.keys.summaries)


def test_the_summaries_follow_the_conversations_ttl_and_go_with_it(client: redis.Redis) -> None:
    """The summaries hash carries the conversation's TTL, ``delete`` removes it, and one left
    behind by a conversation that expired is read as nothing and deleted."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 5)
    history.set_ttl(600)
    manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    assert 0 < client.pttl(history.keys.summaries) <= 600_000
    history.set_ttl(None)
    assert manager.summaries()
    assert client.pttl(history.keys.summaries) == -1
    assert history.delete()
    assert not client.exists(history.keys.summaries)
    fill(history, 5)
    manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    client.delete(history.keys.msgs, history.keys.meta)  # as if expired
    assert manager.summaries() == []
    assert not client.exists(history.keys.summaries)


def test_no_conversation_no_summaries_hash(client: redis.Redis) -> None:
    """Messages evicted from a conversation that no longer exists are summarized by no pod
    and write nothing."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 5)
    dropped = turn_request(manager, history).dropped
    history.delete()
    assert manager.on_turn_complete(dropped, "agent-1") is None
    assert summarizer.calls == []
    assert not client.exists(history.keys.summaries)


def test_a_crashed_pods_claim_expires(client: redis.Redis) -> None:
    """Messages claimed by a pod that never stored a summary are claimed again once its
    claim expires, not before; a retried claim gets its own messages again (and extends it)."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    ids = [m.id for m in history.snapshot()]
    assert history.execute(core.claim(ids, token="a", now_ms=1_000, claim_ms=5_000)) == [0, 1, 2]
    assert history.execute(core.claim(ids, token="a", now_ms=1_001, claim_ms=5_000)) == [0, 1, 2]
    assert history.execute(core.claim(ids, token="b", now_ms=6_000, claim_ms=5_000)) == []
    assert history.execute(core.claim(ids, token="b", now_ms=6_001, claim_ms=5_000)) == [0, 1, 2]


def test_a_retried_store_is_applied_once(client: redis.Redis) -> None:
    """A store repeated with its token (a reply lost, redis-py re-sending) keeps one summary."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    ids = [m.id for m in history.snapshot()]
    history.execute(core.claim(ids, token="a", now_ms=0, claim_ms=5_000))
    first = history.execute(core.store("Previously: hello.", ids, token="a", kept=4))
    assert history.execute(core.store("Previously: hello.", ids, token="a", kept=4)) == first
    assert [s.text for s in history.execute(core.read())] == ["Previously: hello."]


def test_past_the_cap_the_oldest_summary_goes_and_its_messages_stay_summarized(
    client: redis.Redis,
) -> None:
    """With ``max_summaries`` kept, a new one drops the oldest; the messages the dropped one
    covered are not summarized again."""
    summarizer = Counting()
    history, manager = pod(client, summarizer, max_summaries=2)
    fill(history, 4)
    for i in range(4, 8):
        manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
        history.append_many([Message.user(f"question {i} " * 20), Message.assistant("ok " * 20)])
    manager.on_turn_complete(turn_request(manager, history).dropped, "agent-1")
    assert len(summarizer.calls) == 5
    assert len(manager.summaries()) == 2
    assert manager.summaries()[-1].startswith("Previously: question 5")
    covered = [i for call in summarizer.calls for i in call]
    assert len(covered) == len(set(covered))  # no message summarized twice


def test_summaries_over_the_limits_are_refused_before_anything_is_sent(
    client: redis.Redis,
) -> None:
    """A summary over ``MAX_SUMMARY_BYTES``, over ``MAX_SUMMARY_MESSAGES`` ids, a claim over
    ``MAX_SUMMARY_CANDIDATES`` and a cap over ``MAX_SUMMARIES`` raise; nothing is written."""
    history = RedisHistory(client, "conv-1", namespace="tenant-a")
    fill(history, 1)
    core = SummaryCore(history.keys, "conv-1", "tenant-a")
    with pytest.raises(LimitExceededError, match="bytes"):
        core.store("é" * limits.MAX_SUMMARY_BYTES, ["a"], token="t", kept=4)
    with pytest.raises(LimitExceededError, match="covers"):
        core.store("x", ["a"] * (limits.MAX_SUMMARY_MESSAGES + 1), token="t", kept=4)
    with pytest.raises(LimitExceededError, match="offered"):
        core.claim(["a"] * (limits.MAX_SUMMARY_CANDIDATES + 1), token="t", now_ms=0, claim_ms=1)
    with pytest.raises(ValidationError):
        HistoryManagerConfig(max_summaries=limits.MAX_SUMMARIES + 1)
    assert not client.exists(history.keys.summaries)


def test_only_a_history_keeps_the_summaries(client: redis.Redis) -> None:
    """Only a ``RedisHistory`` or an ``AsyncRedisHistory`` keeps the summaries; anything else
    is a ``TypeError``."""
    with pytest.raises(TypeError, match="RedisHistory or an AsyncRedisHistory"):
        HistoryManager(history=object())  # type: ignore[arg-type]


@pytest.mark.real_redis
def test_four_pods_completing_one_turn_summarize_it_once(redis_server: RedisServer) -> None:
    """Four pods, each on its own connection, complete the same turn at once: the summarizer
    runs once, and every pod's next request carries its summary."""
    setup = redis_server.client()
    setup.flushall()
    summarizer = Counting()
    fill(RedisHistory(setup, "conv-1", namespace="tenant-a"), 6)
    pods = [pod(redis_server.client(), summarizer) for _ in range(4)]
    requests = [turn_request(manager, history) for history, manager in pods]
    assert all(r.dropped == requests[0].dropped for r in requests)
    start = threading.Barrier(len(pods))
    results: list[str | None] = [None] * len(pods)

    def complete(i: int) -> None:
        start.wait()
        results[i] = pods[i][1].on_turn_complete(requests[i].dropped, "agent-1")

    threads = [threading.Thread(target=complete, args=(i,)) for i in range(len(pods))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(summarizer.calls) == 1
    [summary] = [r for r in results if r is not None]
    for history, manager in pods:
        assert turn_request(manager, history).messages[0].content == f"{PROMPT}\n\n{summary}"


def test_a_summary_compaction_replaced_in_part_is_not_sent_and_its_live_part_is_redone(
    client: redis.Redis,
) -> None:
    """Once compaction splices a summary over some of the messages a manager summary covers,
    requests carry compaction's summary and not the manager's; the next ``on_turn_complete``
    drops the manager's and summarizes its messages still live, so no message is covered by
    two summaries of one request."""
    summarizer = Counting()
    history, manager = pod(client, summarizer)
    fill(history, 6)
    first = turn_request(manager, history)
    manager_summary = manager.on_turn_complete(first.dropped, "agent-1")
    assert manager_summary is not None
    assert len(first.dropped) > 3
    compacted = Message.system(
        f"{PROMPT}\n\nCompacted: the first two questions.",
        metadata={"summary": True, "system_prompt": PROMPT},
    )
    history.splice_prefix(5, compacted)  # the prompt and the first two turns
    request = turn_request(manager, history)
    system = request.messages[0].content
    assert "Compacted: the first two questions." in system
    assert manager_summary not in system
    redone = manager.on_turn_complete(request.dropped, "agent-1")
    assert redone is not None
    live = {m.id for m in history.snapshot()}
    assert set(summarizer.calls[-1]) <= live
    assert set(summarizer.calls[-1]) >= {m.id for m in first.dropped[4:]}  # after the cut
    assert manager.summaries() == [redone]
    final = turn_request(manager, history).messages[0].content
    assert final == f"{PROMPT}\n\nCompacted: the first two questions.\n\n{redone}"
