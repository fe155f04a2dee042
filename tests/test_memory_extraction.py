"""Memory extraction: the offline extractor's rules, and runs over a conversation on real
Redis that extract each message once across concurrent pods, take over a run that died, and
keep each fact once."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import redis
from chat_server import ChatServer, Reply
from commands import clean_env, run_cli
from faults import FaultProxy
from worker_processes import DEADLINE, Workers, wait_for

from redis_history import (
    ExtractionError,
    JobRefusedError,
    Message,
    RedisHistory,
    StoreUnavailableError,
)
from redis_history.compaction.jobs import (
    EXTRACTION_FUNCTION,
    CompactionOnlyJob,
    CompactionQueue,
    compaction_queue,
)
from redis_history.compaction.metrics import WorkerMetrics
from redis_history.memory import MemoryFilters, RedisLongTermMemory, extraction
from redis_history.memory.extraction import (
    Fact,
    MemoryExtraction,
    OpenAICompatibleExtractor,
    RuleExtractor,
)
from redis_history.store.keys import job_id_prefix
from redis_history.wire.scripts import script

KEY = "sk-secret-extraction-key"
WHO = MemoryFilters("assistant", "u")
T = TypeVar("T")


def turns(*said: str) -> list[Message]:
    """A user message saying each text, each answered."""
    out: list[Message] = []
    for text in said:
        out += [Message.user(text), Message.assistant("Noted.")]
    return out


def test_the_rules_turn_first_person_statements_into_facts() -> None:
    messages = turns(
        "Hi! I moved from Lisbon to Porto last year. Where should I eat tonight?",
        "I'm allergic to peanuts and my sister lives in Berlin.",
        "I prefer window seats. ok",
    )
    facts = RuleExtractor().extract([*messages, Message.assistant("I am an assistant.")])
    assert [f.text for f in facts] == [
        "Moved from Lisbon to Porto last year.",
        "Is allergic to peanuts and their sister lives in Berlin.",
        "Prefers window seats.",
    ]
    assert [f.message_ids for f in facts] == [
        (messages[0].id,),
        (messages[2].id,),
        (messages[4].id,),
    ]
    assert RuleExtractor().extract(turns("What do I like?", "I am", "Thanks a lot!")) == []


class Counting(RuleExtractor):
    """The rules, counting each message it is handed."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        with self.lock:
            self.seen.update(m.id for m in messages)
        return super().extract(messages)


@pytest.mark.real_redis
def test_each_message_is_extracted_once_into_memories_with_their_provenance(
    real_redis: redis.Redis,
) -> None:
    """Runs extract what is new since the last; the memories name the conversation, the
    messages, the extractor and when."""
    history = RedisHistory(real_redis, "conv-1")
    memory = RedisLongTermMemory(real_redis)
    extractor = Counting()
    run = MemoryExtraction(memory, extractor, "assistant", clock=lambda: 1_000)
    history.append_many(turns("I live in Porto.", "I have two cats."))
    done = run.extract(history, "u")
    assert (done.messages, done.facts, len(done.memory_ids)) == (4, 2, 2)
    assert run.extract(history, "u").messages == 0
    history.append_many(turns("I work as a nurse."))
    assert run.extract(history, "u").facts == 1
    assert set(extractor.seen.values()) == {1}
    assert len(extractor.seen) == 6
    records = {r.text: r.metadata for r in memory.list(WHO)}
    assert set(records) == {"Lives in Porto.", "Has two cats.", "Works as a nurse."}
    porto = records["Lives in Porto."]
    assert porto["conversation_ids"] == ["conv-1"]
    assert porto["message_ids"] == [history.snapshot()[0].id]
    assert (porto["extractor"], porto["extracted_ms"]) == ("rules", 1_000)
    assert int(real_redis.hget(history.keys.extraction, "count") or 0) == 6


@pytest.mark.real_redis
def test_pods_extracting_at_once_hand_each_message_to_the_extractor_once(
    real_redis: redis.Redis,
) -> None:
    """Six pods run extraction on one conversation while it grows: every message reaches
    the extractor exactly once, and no fact is kept twice."""
    history = RedisHistory(real_redis, "conv-2")
    memory = RedisLongTermMemory(real_redis)
    extractor = Counting()
    said = [f"I have visited city number {i}." for i in range(24)]

    def pod(index: int) -> None:
        run = MemoryExtraction(memory, extractor, "assistant")
        for round_ in range(4):
            if index == 0:
                history.append_many(turns(*said[round_ * 6 : round_ * 6 + 6]))
            run.extract(RedisHistory(real_redis, "conv-2"), "u")

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(pod, range(6)))
    MemoryExtraction(memory, extractor, "assistant").extract(history, "u")
    assert len(extractor.seen) == len(history.snapshot()) == 48
    assert set(extractor.seen.values()) == {1}
    texts = [r.text for r in memory.list(WHO, limit=100)]
    assert len(texts) == len(set(texts)) == 24


@pytest.mark.real_redis
def test_a_run_that_died_is_taken_over_and_its_facts_kept_once(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that stored its facts and died before it moved the cursor: once its claim ran
    out, the next run extracts the same messages, and their facts merge into the same
    memories."""
    history = RedisHistory(real_redis, "conv-3")
    history.append_many(turns("I live in Porto.", "I prefer tea."))
    memory = RedisLongTermMemory(real_redis)
    extractor = Counting()
    run = MemoryExtraction(memory, extractor, "assistant", lease_ms=50)

    def died(*_: object) -> None:
        raise SystemExit("killed")

    with monkeypatch.context() as patched:
        patched.setattr(extraction, "_commit", died)
        with pytest.raises(SystemExit):
            run.extract(history, "u")
    first = sorted(r.memory_id or "" for r in memory.list(WHO))
    assert run.extract(history, "u").busy  # its claim still holds
    real_redis.pexpire(history.keys.extract_claim, 1)
    while real_redis.exists(history.keys.extract_claim):
        pass
    again = run.extract(history, "u")
    assert sorted(again.memory_ids) == first
    assert sorted(r.memory_id or "" for r in memory.list(WHO)) == first
    assert set(extractor.seen.values()) == {2}
    assert run.extract(history, "u").messages == 0


@pytest.mark.real_redis
def test_a_failing_extractor_releases_the_claim_and_moves_nothing(
    real_redis: redis.Redis,
) -> None:
    history = RedisHistory(real_redis, "conv-4")
    history.append_many(turns("I live in Porto."))
    memory = RedisLongTermMemory(real_redis)

    class Failing(RuleExtractor):
        def extract(self, messages: Sequence[Message]) -> list[Fact]:
            raise RuntimeError("the model is down")

    with pytest.raises(RuntimeError):
        MemoryExtraction(memory, Failing(), "assistant").extract(history, "u")
    assert not real_redis.exists(history.keys.extract_claim, history.keys.extraction)
    assert MemoryExtraction(memory, RuleExtractor(), "assistant").extract(history, "u").facts == 1


@pytest.mark.real_redis
def test_messages_compaction_removed_past_the_cursor_leave_the_rest_to_extract(
    real_redis: redis.Redis,
) -> None:
    """The cursor's message summarized away: every message left is newer, and extracted."""
    history = RedisHistory(real_redis, "conv-5")
    history.append_many(turns("I live in Porto.", "I prefer tea."))
    memory = RedisLongTermMemory(real_redis)
    run = MemoryExtraction(memory, RuleExtractor(), "assistant")
    run.extract(history, "u")
    history.append_many(turns("I drive an electric car."))
    real_redis.hset(history.keys.extraction, "last", "a-message-compaction-removed")
    assert run.extract(history, "u").messages == 6
    assert "Drives an electric car." in [r.text for r in memory.list(WHO)]


@pytest.mark.real_redis
def test_the_extraction_state_goes_with_a_conversation_that_expires(
    real_redis: redis.Redis,
) -> None:
    history = RedisHistory(real_redis, "conv-6", ttl=3600)
    history.append_many(turns("I live in Porto."))
    MemoryExtraction(RedisLongTermMemory(real_redis), RuleExtractor(), "assistant").extract(
        history, "u"
    )
    assert 0 < real_redis.pttl(history.keys.extraction) <= 3_600_000
    history.delete()
    assert not real_redis.exists(history.keys.extraction)


def chat(content: object) -> Reply:
    """A chat-completions reply whose message is ``content`` (as JSON unless a str)."""
    text = content if isinstance(content, str) else json.dumps(content)
    return Reply(body={"choices": [{"message": {"role": "assistant", "content": text}}]})


@pytest.mark.real_redis
def test_the_llm_extractor_asks_for_structured_facts_and_credits_their_messages(
    chat_server: ChatServer, real_redis: redis.Redis
) -> None:
    """One request with the messages and their ids and a JSON schema; the facts come back
    with the messages they name (unknown ids dropped; none left: the user's messages), and
    run through an extraction into memories."""
    messages = turns("I moved to Porto in May.", "Also, no more coffee for me.")
    chat_server.default = chat(
        {
            "facts": [
                {"text": "Moved to Porto in May.", "message_ids": [messages[0].id, "made-up"]},
                {"text": "Stopped drinking coffee.", "message_ids": []},
                {"text": "  ", "message_ids": [messages[2].id]},
            ]
        }
    )
    extractor = OpenAICompatibleExtractor(base_url=chat_server.url, model="m", api_key=KEY)
    facts = extractor.extract(messages)
    assert facts == [
        Fact("Moved to Porto in May.", (messages[0].id,)),
        Fact("Stopped drinking coffee.", (messages[0].id, messages[2].id)),
    ]
    (seen,) = chat_server.requests
    assert seen.path.endswith("/chat/completions")
    assert seen.body["response_format"]["json_schema"]["strict"] is True
    assert (
        f"[{messages[2].id}] user: Also, no more coffee for me."
        in seen.body["messages"][1]["content"]
    )
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    history = RedisHistory(real_redis, "conv-llm")
    history.append_many(messages)
    run = MemoryExtraction(RedisLongTermMemory(real_redis), extractor, "assistant")
    assert run.extract(history, "u").facts == 2
    records = RedisLongTermMemory(real_redis).list(WHO)
    assert {r.metadata["extractor"] for r in records} == {"openai:m"}


def test_a_reply_that_is_not_the_facts_is_an_extraction_error_without_the_key(
    chat_server: ChatServer,
) -> None:
    extractor = OpenAICompatibleExtractor(base_url=chat_server.url, model="m", api_key=KEY)
    for reply in (
        chat("not json"),
        chat({"facts": [{"text": "x"}]}),
        Reply(status=400, body={"error": KEY}),
    ):
        chat_server.replies = [reply]
        with pytest.raises(ExtractionError) as info:
            extractor.extract(turns("I live in Porto."))
        assert KEY not in str(info.value)
    assert KEY not in repr(extractor)
    assert extractor.extract([]) == []
    env = {
        "REDIS_HISTORY_SUMMARIZER_BASE_URL": chat_server.url,
        "REDIS_HISTORY_SUMMARIZER_MODEL": "x",
    }
    assert OpenAICompatibleExtractor.from_env(env).name == "openai:x"


@pytest.mark.real_redis
def test_extraction_and_forgetting_run_on_a_cluster(cluster_client: Any) -> None:
    """On Redis Cluster a conversation's extraction keys share its slot, an owner's memories
    theirs; extraction, then forgetting the user, leave no key of the owner on any node."""
    history = RedisHistory(cluster_client, "conv-cluster")
    history.append_many(turns("I live in Porto.", "I have two cats."))
    keys = history.keys
    assert {cluster_client.keyslot(k) for k in keys.all} == {cluster_client.keyslot(keys.msgs)}
    memory = RedisLongTermMemory(cluster_client)
    run = MemoryExtraction(memory, RuleExtractor(), "assistant")
    assert run.extract(history, "u").facts == 2
    assert run.extract(history, "u").messages == 0
    assert memory.forget_owner("assistant", "u") == 2
    left = [
        key
        for node in cluster_client.get_primaries()
        for key in cluster_client.get_redis_connection(node).scan_iter(match="*{assistant:u}*")
    ]
    assert left == []


@pytest.mark.real_redis
def test_a_worker_extracts_what_a_pod_enqueued_without_the_turn_waiting(
    redis_url: str, real_redis: redis.Redis
) -> None:
    """``queue.extract(history, agent, user)`` enqueues a job (one id per conversation and
    owner) and returns; ``redis-history worker --burst`` in its own process runs it with the
    worker's extractor, and a second job finds nothing new."""
    queue = compaction_queue(real_redis, "redis-history")
    history = RedisHistory(real_redis, "conv-job")
    history.append_many(turns("I live in Porto.", "I have two cats."))
    job = queue.extract(history, "assistant", "u")
    assert job.func_name == EXTRACTION_FUNCTION
    assert queue.extract(history, "assistant", "u").id == job.id
    assert RedisLongTermMemory(real_redis).list(WHO) == []  # nothing ran in the pod
    env = clean_env(REDIS_HISTORY_EXTRACTOR="rules")
    result = run_cli("worker", "--burst", "--redis-url", redis_url, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "extraction job=" in output
    assert "status=extracted messages=4 facts=2" in output
    assert "status=nothing" in output  # the same id queued twice: the second finds nothing
    texts = {r.text for r in RedisLongTermMemory(real_redis).list(WHO)}
    assert texts == {"Lives in Porto.", "Has two cats."}
    assert queue.failed_job_registry.count == 0


@pytest.mark.real_redis
def test_a_tenants_queue_takes_only_its_own_extractions(real_redis: redis.Redis) -> None:
    queue = compaction_queue(real_redis, "redis-history", namespace="tenant-a")
    history = RedisHistory(real_redis, "conv-1", namespace="tenant-b")
    with pytest.raises(JobRefusedError, match="takes jobs of namespace 'tenant-a' only"):
        queue.extract(history, "assistant", "u")
    with pytest.raises(ValueError, match="agent id"):
        queue.extract(RedisHistory(real_redis, "c", namespace="tenant-a"), "a:b", "u")
    job = queue.extract(RedisHistory(real_redis, "c", namespace="tenant-a"), "assistant")
    assert job.id.startswith(job_id_prefix("tenant-a"))
    assert EXTRACTION_FUNCTION in CompactionOnlyJob.allowed_functions


def test_the_worker_counts_extractions_by_outcome() -> None:
    metrics = WorkerMetrics("q", lambda: (0, 0))
    done = {"status": "extracted", "facts": 4, "added": 2, "merged": 1, "superseded": 1}
    metrics.extraction_done("extracted", done)
    metrics.extraction_done("failed")
    samples = {
        (s.name, s.labels.get("outcome")): s.value
        for family in metrics.registry.collect()
        for s in family.samples
    }
    assert samples["redis_history_extractions_total", "extracted"] == 1
    assert samples["redis_history_extractions_total", "failed"] == 1
    assert samples["redis_history_extractions_total", "busy"] == 0
    assert samples["redis_history_facts_extracted_total", "added"] == 2
    assert samples["redis_history_facts_extracted_total", "merged"] == 1
    assert samples["redis_history_facts_extracted_total", "superseded"] == 1
    assert samples["redis_history_facts_extracted_total", "deleted"] == 0


CHAOS = ["chaos-0", "chaos-1", "chaos-2"]
"""The chaos tests' conversations, each written by two pods."""
CHAOS_TURNS = 4
"""Turns each pod appends: 16 messages a conversation, 24 facts in all."""
CHAOS_LEASE = {
    "REDIS_HISTORY_EXTRACTOR": "worker_doubles:BlockingExtractor",
    "REDIS_HISTORY_EXTRACTION_LEASE": "1",
}
"""The workers' extractor (its first call blocks until the test kills it) and a 1 s claim."""


def persistently(call: Callable[[], T]) -> T:
    """``call()``, made again after Redis could not be reached, as a pod does with a turn's
    append (applied once per batch of message ids) and its enqueue (one job id per
    conversation)."""
    for _ in range(20):
        try:
            return call()
        except (StoreUnavailableError, redis.ConnectionError):
            time.sleep(0.05)
    return call()


def chaos_pod(
    index: int,
    history: RedisHistory,
    queue: CompactionQueue,
    after_turn: Callable[[], None] | None = None,
) -> None:
    """Pod ``index``'s turns: each appended, then its extraction enqueued, then ``after_turn``."""
    for turn in range(CHAOS_TURNS):
        persistently(partial(history.append_many, turns(f"I have visited city {index}-{turn}.")))
        persistently(partial(queue.extract, history, "assistant", "u"))
        if after_turn is not None:
            after_turn()


def kill_the_blocked_extraction(
    workers: Workers, candidates: Sequence[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """SIGKILL the worker whose work horse BlockingExtractor holds, and the horse; returns
    the worker left."""
    end = time.monotonic() + DEADLINE
    # polled: a BLPOP longer than the client's socket timeout would fail on its own
    while not (started := cast(bytes | None, workers.client.lpop("test:extract-started"))):
        if time.monotonic() > end:
            logs = "\n".join(map(workers.log, candidates))
            pytest.fail(f"no extraction started; the workers said:\n{logs}")
        time.sleep(0.05)
    horse = int(started)
    parent = int(Path(f"/proc/{horse}/stat").read_text().rsplit(")", 1)[1].split()[1])
    (killed,) = [w for w in candidates if w.pid == parent]  # the horse's worker
    Workers.signal(killed, horse, signal.SIGKILL)
    killed.wait()
    (left,) = [w for w in candidates if w is not killed]
    return left


def extract_until_caught_up(client: redis.Redis, why: Callable[[], str]) -> list[RedisHistory]:
    """Enqueue the extraction of every conversation whose cursor is short of its last message
    until none is (a job a killed worker took never finishes); returns the histories."""
    queue = compaction_queue(client, "redis-history")
    histories = [RedisHistory(client, name) for name in CHAOS]
    end = time.monotonic() + DEADLINE
    while True:
        behind = [
            h for h in histories
            if client.hget(h.keys.extraction, "last") != h.snapshot()[-1].id.encode()
        ]  # fmt: skip
        if not behind:
            return histories
        assert time.monotonic() < end, why()
        for history in behind:
            queue.extract(history, "assistant", "u")
        time.sleep(0.5)


def assert_each_message_counted_once_and_each_fact_kept_once(
    client: redis.Redis, histories: Sequence[RedisHistory]
) -> Counter[str]:
    """Each conversation's cursor counted each of its messages once, every message reached
    the extractor, no fact is kept twice; returns how often the extractor saw each message."""
    extracted = cast(list[bytes], client.lrange("test:extracted", 0, -1))
    handed = Counter(m.decode() for m in extracted)
    for history in histories:
        ids = [m.id for m in history.snapshot()]
        assert len(ids) == len(set(ids)) == 2 * 2 * CHAOS_TURNS
        assert set(ids) <= set(handed)
        assert int(client.hget(history.keys.extraction, "count") or 0) == len(ids)
    texts = [r.text for r in RedisLongTermMemory(client).list(WHO, limit=100)]
    assert len(texts) == len(set(texts)) == 6 * CHAOS_TURNS
    return handed


@pytest.mark.real_redis
@pytest.mark.slow
def test_pods_and_two_workers_one_killed_mid_extraction_lose_nothing_and_keep_each_fact_once(
    real_redis: redis.Redis, workers: Workers
) -> None:
    """Six pods, two per conversation, append turns and enqueue an extraction after each; two
    worker processes run the jobs, and the first extraction blocks until the test SIGKILLs
    that worker whole. Its claim runs out (a 1 s lease), the other worker goes on: every
    message is extracted and counted once in its conversation's cursor, each fact is kept
    once, and only the killed run's messages were handed to the extractor twice."""
    workers.env.update(CHAOS_LEASE)
    both = workers.start("Recording"), workers.start("Recording")
    queue = compaction_queue(real_redis, "redis-history")

    def pod(index: int) -> None:
        chaos_pod(index, RedisHistory(real_redis, CHAOS[index % 3]), queue)

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(pod, range(6)))
    left = kill_the_blocked_extraction(workers, both)
    histories = extract_until_caught_up(real_redis, lambda: workers.log(left))
    handed = assert_each_message_counted_once_and_each_fact_kept_once(real_redis, histories)
    twice = {message_id for message_id, n in handed.items() if n > 1}
    assert all(n <= 2 for n in handed.values())
    assert len(twice) <= 16  # the killed run's messages, of one conversation


def _cursor_move() -> re.Pattern[bytes]:
    """An ``extract_commit`` that moves a cursor, on the wire: after the script's SHA1, the
    key count, three keys and the token, a message id (not ``''``, a release) and a count of
    messages that is not 0."""
    arg = rb"\$\d+\r\n[^\r\n]*\r\n"
    sha = re.escape(script("extract_commit").sha.encode())
    return re.compile(sha + rb"\r\n" + arg * 5 + rb"\$[1-9]\d*\r\n[^\r\n]+\r\n\$\d+\r\n[1-9]")


CURSOR_MOVE = _cursor_move()
STORE = script("memory_store").sha.encode()
APPENDS = (script("append_small").sha.encode(), script("append").sha.encode())
ONE_IN = 30
"""The proxy loses the reply to one command in 30, anyone's (a run sends over a thousand)."""


@pytest.fixture
def proxied_workers(
    fault_proxy: FaultProxy, redis_url: str, real_redis: redis.Redis, tmp_path: Path
) -> Iterator[Workers]:
    """Workers reaching the store and queue through the fault proxy, re-sending a command
    once when its connection fails (redis-py's ``retry_on_timeout`` URL option; a plain URL
    gives a client no retry at all); the doubles report to the server behind the proxy."""
    url = f"{fault_proxy.url}?retry_on_timeout=true"
    launcher = Workers(real_redis, url, tmp_path, {"TEST_DOUBLES_URL": redis_url})
    yield launcher
    launcher.stop_all()


@pytest.mark.real_redis
@pytest.mark.slow
def test_pods_and_workers_through_dropped_connections_and_lost_replies_count_each_message_once(
    real_redis: redis.Redis, fault_proxy: FaultProxy, proxied_workers: Workers
) -> None:
    """The chaos above with every pod and worker reaching Redis through a proxy that loses
    the reply to one command in 30 after Redis applied it (drawn from a seeded generator),
    and to the first appends, memory stores and cursor moves, and closes every connection
    after each turn of one pod. Half the pods leave the retries to redis-py, half make a
    failed append or enqueue again themselves; the workers re-send a command once: every
    message is still counted once by its conversation's cursor and reaches the extractor,
    and each fact is kept once."""
    for name in ("extract_commit", "memory_store", "append_small", "append"):
        real_redis.script_load(script(name).source)  # a lost NOSCRIPT would prove nothing
    workers = proxied_workers
    workers.env.update(CHAOS_LEASE)
    both = workers.start("Recording"), workers.start("Recording")
    waiting = compaction_queue(real_redis, "redis-history")
    wait_for(lambda: waiting.workers() == 2, "both workers to start")
    fault_proxy.drop_replies({CURSOR_MOVE: 1, STORE: 1, APPENDS[0]: 1, APPENDS[1]: 1})
    fault_proxy.drop_at_random(ONE_IN, seed=7)

    def pod(index: int) -> None:
        client = (  # redis-py's default Retry, or none (and the pod's own loop)
            redis.Redis(host=fault_proxy.host, port=fault_proxy.port)
            if index % 2
            else redis.Redis.from_url(fault_proxy.url)
        )
        severs = fault_proxy.kill_all if index == 0 else None
        with client:
            history = RedisHistory(client, CHAOS[index % 3])
            chaos_pod(index, history, compaction_queue(client, "redis-history"), severs)

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(pod, range(6)))
    left = kill_the_blocked_extraction(workers, both)
    histories = extract_until_caught_up(real_redis, lambda: workers.log(left))
    assert_each_message_counted_once_and_each_fact_kept_once(real_redis, histories)
    assert fault_proxy.dropped_by(CURSOR_MOVE) == 1, "no cursor move lost its reply"
    assert fault_proxy.dropped_by(STORE) == 1, "no memory store lost its reply"
    assert sum(map(fault_proxy.dropped_by, APPENDS)) >= 1, "no append lost its reply"
    assert fault_proxy.dropped_at_random > 0
    assert fault_proxy.severed > 0


@pytest.mark.real_redis
def test_a_claim_or_a_commit_sent_again_after_its_reply_was_lost_answers_as_the_first(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose ``SET NX`` was applied and sent again (its reply lost) is the run's own,
    not another's; a cursor move sent again answers that it held the claim, counting nothing
    twice."""
    history = RedisHistory(real_redis, "conv-resent")
    history.append_many(turns("I live in Porto."))
    token = "0" * 31 + "7"
    monkeypatch.setattr("uuid.uuid4", type("Token", (), {"hex": token}))
    real_redis.set(history.keys.extract_claim, token)  # the first SET, applied
    run = MemoryExtraction(RedisLongTermMemory(real_redis), RuleExtractor(), "assistant")
    done = run.extract(history, "u")
    assert (done.busy, done.lost, done.messages, done.facts) == (False, False, 2, 1)
    commit = extraction._commit(history.keys, token, history.snapshot()[-1].id, 2)
    assert commit.parse(real_redis.execute_command(*commit.command)) == 1  # type: ignore[no-untyped-call]
    assert real_redis.hget(history.keys.extraction, "count") == b"2"
    other = extraction._commit(history.keys, "f" * 32, history.snapshot()[-1].id, 2)
    assert other.parse(real_redis.execute_command(*other.command)) == 0  # type: ignore[no-untyped-call]
