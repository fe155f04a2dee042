"""Long-term memory's keyword index: a textbook BM25 over Snowball's English stems and stop
list, and the memories an earlier version indexed by other terms indexed again (by the next
recall, or by ``reindex`` and its command), on real Redis."""

from __future__ import annotations

import json
import re
from typing import cast

import fakeredis
import pytest
import redis
from commands import cli
from memory_samples import MEMORIES, QUERIES, textbook_top, top_three
from test_redis_memory import run_cut

from redis_history import CorruptHistoryError
from redis_history.memory import MemoryFilters, RedisLongTermMemory, redis_memory
from redis_history.memory.redis_memory import STOPWORDS, TERMS, _reterm_calls, terms
from redis_history.wire.lane import send

OWNER = {"agent_id": "a", "user_id": "u"}
WHO = MemoryFilters("a", "u")
TEXTS = (
    "Loves cooking for friends on Saturdays.",
    "Photographs birds on weekends with a 400 mm lens.",
    "Has been renovating the kitchen since October.",
    "Is not allergic to anything; avoids dairy.",
)


def legacy_terms(text: str) -> list[str]:
    """The terms an earlier version made: ``\\w+`` words less a shorter stop list, plural
    ``s`` and ``ies`` stripped."""
    stop = set(
        re.findall(
            r"\w+",
            """a an and are as at be been but by can could did do does for from had has have he
            her him his how i if in into is it its me my of on or our she so than that the
            their them then there these they this to was we were what when where which who why
            will with would you your""",
        )
    )
    out = []
    for word in re.findall(r"\w+", text.casefold()):
        if word in stop or (len(word) == 1 and word.isalpha()):
            continue
        term = word
        if word.isascii() and len(word) > 3 and not word.endswith("ss"):
            term = word[:-3] + "y" if word.endswith("ies") and len(word) > 4 else word
            term = term[:-1] if term.endswith("s") else term
        out.append(term)
    return out


def store_legacy(
    client: redis.Redis, texts: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> RedisLongTermMemory:
    """``texts`` stored for OWNER as an earlier version kept them: terms made by
    :func:`legacy_terms`, records naming no scheme, a stats hash without ``terms``."""
    memory = RedisLongTermMemory(client, clock=lambda: 1_000)
    with monkeypatch.context() as patched:
        patched.setattr(redis_memory, "terms", legacy_terms)
        memory.store_many([(text, OWNER) for text in texts])
    keys = memory.keys("a", "u")
    for memory_id, raw in client.hgetall(keys.docs).items():
        record = json.loads(raw)
        del record["s"]
        client.hset(keys.docs, memory_id, json.dumps(record, separators=(",", ":")))
    client.hdel(keys.stats, "terms")
    return memory


def owner_data(client: redis.Redis, memory: RedisLongTermMemory) -> dict[str, object]:
    """Every key of OWNER by its name less the owner's part, with its contents (the records
    decoded)."""
    base = memory.keys("a", "u").stats.removesuffix(":stats")
    out: dict[str, object] = {}
    for key in client.scan_iter(match=f"{base}:*"):
        name = key.decode().removeprefix(base)
        kind = client.type(key)
        out[name] = client.hgetall(key) if kind == b"hash" else client.zrange(key, 0, -1)
    records = {k: json.loads(v) for k, v in client.hgetall(f"{base}:docs").items()}
    for record in records.values():  # cjson, which a merge writes with, writes [] as {}
        record.update({k: v or [] for k, v in record.items() if k in "cgkx"})
    out[":docs"] = records
    return out


def docs(client: redis.Redis, key: str) -> list[tuple[str, bytes]]:
    """The records in ``key``, by id, as a pass of the indexing reads them."""
    return [(k.decode(), v) for k, v in cast(dict[bytes, bytes], client.hgetall(key)).items()]


@pytest.fixture
def fresh(real_redis: redis.Redis) -> dict[str, object]:
    """What this version writes for TEXTS in an owner (flushed again after it is read)."""
    memory = RedisLongTermMemory(real_redis, clock=lambda: 1_000)
    memory.store_many([(text, OWNER) for text in TEXTS])
    data = owner_data(real_redis, memory)
    real_redis.flushall()
    return data


def test_terms_are_snowball_stems_less_the_stop_list() -> None:
    assert terms("Loves cooking; cooks, cooked") == ["love", "cook", "cook", "cook"]
    assert terms("What allergies? Allergic!") == ["allergi", "allerg"]
    assert terms("Isn't he the one who won't?") == ["one"]  # don't -> don, t: both left out
    assert {"not", "no", "very", "don", "won", "ourselves"} <= STOPWORDS
    assert terms("Café naïve 東京タワー") == ["café", "naïve", "東京", "京タ", "タワ", "ワー"]


def test_keyword_recall_ranks_as_a_textbook_bm25_on_the_labelled_set() -> None:
    """Each question's top 3 by keywords is the textbook BM25's, computed on the texts alone
    (``memory_samples.textbook_top``), question by question."""
    ours = top_three(fakeredis.FakeRedis(), None, MEMORIES, QUERIES)
    assert ours == textbook_top(MEMORIES, QUERIES, 3)
    found = [
        len(relevant & set(got)) / len(relevant)
        for (_, relevant), got in zip(QUERIES, ours, strict=True)
    ]
    assert sum(found) / len(found) >= 0.92


@pytest.mark.real_redis
def test_a_recall_indexes_an_earlier_versions_memories_again_first(
    real_redis: redis.Redis, fresh: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memories an earlier version indexed: the first recall indexes them again by TERMS (a
    stem only the new terms share finds its memory), after which the owner's keys hold
    exactly what this version writes for the same texts."""
    memory = store_legacy(real_redis, TEXTS, monkeypatch)
    keys = memory.keys("a", "u")
    assert real_redis.exists(keys.term("cooking"))
    assert [r.text for r in memory.recall("Who cooks?", WHO, 1)] == [TEXTS[0]]
    assert real_redis.hget(keys.stats, "terms") == TERMS.encode()
    assert owner_data(real_redis, memory) == fresh
    assert memory.reindex("a", "u") == (0, 0)


@pytest.mark.real_redis
def test_reindex_and_its_command_index_a_namespace_again(
    real_redis: redis.Redis,
    redis_url: str,
    fresh: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = store_legacy(real_redis, TEXTS, monkeypatch)
    assert memory.reindex("a", "u") == (len(TEXTS), 0)
    assert owner_data(real_redis, memory) == fresh
    real_redis.flushall()
    memory = store_legacy(real_redis, TEXTS, monkeypatch)
    done = cli("memory", "reindex", "--redis-url", redis_url, "--embedder", "none")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"a/u  {len(TEXTS)}  0"]
    assert f"{len(TEXTS)} memories indexed again, 0 embedded, 1 owners" in done.stderr
    assert owner_data(real_redis, memory) == fresh


@pytest.mark.real_redis
def test_a_memory_changed_after_it_was_read_is_indexed_by_the_next_pass(
    real_redis: redis.Redis, fresh: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexing writes only the records still as read: one merged meanwhile (stored
    again) is left as it is, for the next pass, which indexes it from its new record."""
    memory = store_legacy(real_redis, TEXTS, monkeypatch)
    keys = memory.keys("a", "u")
    read = docs(real_redis, keys.docs)
    (merged,) = [memory_id for memory_id, raw in read if json.loads(raw)["t"] == TEXTS[1]]
    memory.store(TEXTS[1].upper(), OWNER)  # the same text, normalized: a merge
    calls = _reterm_calls(keys, read)
    assert sum(send(real_redis, call) for call in calls) == len(TEXTS) - 1
    assert "s" not in json.loads(real_redis.hget(keys.docs, merged) or "")
    assert memory.reindex("a", "u") == (1, 0)
    assert json.loads(real_redis.hget(keys.docs, merged) or "")["s"] == TERMS
    assert owner_data(real_redis, memory) == fresh


@pytest.mark.real_redis
def test_an_indexing_stopped_after_any_write_is_finished_by_the_next(
    real_redis: redis.Redis, fresh: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexing script stopped by an error after any of its writes (Redis keeps them):
    the next pass finishes it, and the owner holds what this version writes."""
    cut = 0
    while True:
        cut += 1
        real_redis.flushall()
        memory = store_legacy(real_redis, TEXTS, monkeypatch)
        keys = memory.keys("a", "u")
        read = docs(real_redis, keys.docs)
        (call,) = _reterm_calls(keys, read)
        if not run_cut(real_redis, call, cut):
            break
        memory.reindex("a", "u")
        data = owner_data(real_redis, memory)
        stats, fresh_stats = data.pop(":stats"), fresh[":stats"]
        assert isinstance(stats, dict)
        assert isinstance(fresh_stats, dict)
        assert {k: v for k, v in stats.items() if k != b"len"} == {
            k: v for k, v in fresh_stats.items() if k != b"len"
        }
        assert data == {k: v for k, v in fresh.items() if k != ":stats"}
    assert cut > 2 * len(TEXTS)


@pytest.mark.real_redis
def test_an_owner_indexed_by_an_unknown_scheme_is_refused(real_redis: redis.Redis) -> None:
    memory = RedisLongTermMemory(real_redis)
    memory.store("aisle seat", OWNER)
    real_redis.hset(memory.keys("a", "u").stats, "terms", "snowball-english-9.9")
    with pytest.raises(CorruptHistoryError, match=r"indexed by snowball-english-9\.9 terms"):
        memory.recall("aisle", WHO, 1)
