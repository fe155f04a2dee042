"""What extraction does with a fact that changed: an extractor's explicit update supersedes
the memory it replaces, a delete forgets it, the offline path decides by similarity; run again
over the same messages, nothing changes twice. On real Redis, the LLM's decisions through a
local chat-completions endpoint."""

from __future__ import annotations

import json

import pytest
import redis
from chat_server import ChatServer, Reply

from redis_history import Message, RedisHistory
from redis_history.compaction.jobs import configure_worker, extract_memories
from redis_history.memory import MemoryFilters, RedisLongTermMemory
from redis_history.memory.embedders import HashingEmbedder, OfflineEmbedder
from redis_history.memory.extraction import (
    Fact,
    MemoryExtraction,
    OpenAICompatibleExtractor,
    RuleExtractor,
)
from redis_history.settings import WorkerSettings

pytestmark = pytest.mark.real_redis

WHO = MemoryFilters("assistant", "u")


def said(history: RedisHistory, *texts: str) -> None:
    for text in texts:
        history.append_many([Message.user(text), Message.assistant("Noted.")])


def live(memory: RedisLongTermMemory) -> list[str]:
    return sorted(r.text for r in memory.list(WHO))


def test_a_move_supersedes_where_the_user_lived_and_a_rerun_changes_nothing(
    real_redis: redis.Redis,
) -> None:
    memory = RedisLongTermMemory(real_redis)
    history = RedisHistory(real_redis, "conv-move")
    run = MemoryExtraction(memory, RuleExtractor(), "assistant")
    said(history, "I live in Lisbon.", "I prefer window seats.")
    assert run.extract(history, "u").outcomes == {"added": 2}
    said(history, "I moved from Lisbon to Porto.")
    done = run.extract(history, "u")
    assert done.outcomes == {"superseded": 1}
    assert live(memory) == ["Lives in Porto.", "Prefers window seats."]
    assert [r.text for r in memory.recall("where does the user live", WHO, 5)] == [
        "Lives in Porto."
    ]
    (old,) = memory.list(WHO, superseded=True)
    assert old.text == "Lives in Lisbon."
    assert old.metadata["superseded_by"] == done.memory_ids[0]
    # the same messages extracted again (a run that died before its cursor moved)
    real_redis.delete(history.keys.extraction)
    run.extract(history, "u")
    assert live(memory) == ["Lives in Porto.", "Prefers window seats."]
    porto = memory.find("Lives in Porto.", WHO)
    assert porto is not None
    assert {r.metadata["superseded_by"] for r in memory.list(WHO, superseded=True)} == {
        porto.memory_id
    }


def test_an_update_of_a_fact_the_owner_never_had_is_added(real_redis: redis.Redis) -> None:
    memory = RedisLongTermMemory(real_redis)
    history = RedisHistory(real_redis, "conv-new")
    said(history, "I moved from Faro to Braga.")
    done = MemoryExtraction(memory, RuleExtractor(), "assistant").extract(history, "u")
    assert done.outcomes == {"added": 1}
    assert live(memory) == ["Lives in Braga."]


def test_the_llm_decides_updates_and_deletes(
    chat_server: ChatServer, real_redis: redis.Redis
) -> None:
    memory = RedisLongTermMemory(real_redis, embedder=HashingEmbedder(), merge_similar=True)
    for text in ("Works at Initech.", "Drinks coffee every morning.", "Has a cat."):
        memory.store(text, {"agent_id": "assistant", "user_id": "u"})
    history = RedisHistory(real_redis, "conv-llm")
    said(history, "I joined Globex last week and quit coffee.")
    (user, _) = history.snapshot()
    facts: list[dict[str, object]] = [
        {"text": "Works at Globex.", "message_ids": [user.id], "action": "update",
         "replaces": "Works at Initech."},
        {"text": "Drinks coffee every morning.", "message_ids": [user.id], "action": "delete",
         "replaces": None},
    ]  # fmt: skip
    chat_server.default = Reply(
        body={"choices": [{"message": {"content": json.dumps({"facts": facts})}}]}
    )
    extractor = OpenAICompatibleExtractor(base_url=chat_server.url, model="m", api_key="k")
    assert extractor.extract([user])[1] == Fact(
        "Drinks coffee every morning.", (user.id,), "delete"
    )
    schema = chat_server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["facts"]["items"]["required"] == [
        "text", "message_ids", "action", "replaces"
    ]  # fmt: skip
    done = MemoryExtraction(memory, extractor, "assistant").extract(history, "u")
    assert done.outcomes == {"superseded": 1, "deleted": 1}
    assert live(memory) == ["Has a cat.", "Works at Globex."]
    assert [r.text for r in memory.list(WHO, superseded=True)] == ["Works at Initech."]
    chat_server.default = Reply(
        body={
            "choices": [
                {"message": {"content": json.dumps({"facts": [{**facts[0], "action": "forget"}]})}}
            ]
        }
    )
    with pytest.raises(Exception, match="facts JSON"):
        extractor.extract([user])


def test_a_fact_refuses_an_unknown_action() -> None:
    with pytest.raises(ValueError, match="add, update, delete"):
        Fact("Likes tea.", (), "upsert")
    with pytest.raises(TypeError, match="replaces"):
        Fact("Likes tea.", (), "update", 3)  # type: ignore[arg-type]


def test_a_workers_memory_merges_supersedes_expires_and_caps_as_its_settings_say(
    real_redis: redis.Redis,
) -> None:
    """The extraction job's memory takes REDIS_HISTORY_MEMORY_EMBEDDER (then it merges
    restatements and supersedes updates by similarity), _MEMORY_TTL and _MEMORY_CAP."""
    settings = WorkerSettings(memory_embedder="offline", memory_ttl=60.0, memory_cap=4)
    configure_worker(settings, store=real_redis)
    try:
        history = RedisHistory(real_redis, "conv-job")
        said(history, "I live in Lisbon.", "I prefer window seats.", "I like tea.")
        first = extract_memories("default", "conv-job", "rh", "assistant", "u")
        assert (first["status"], first["added"]) == ("extracted", 3)
        said(history, "I live in Porto.", "I like jazz.")
        second = extract_memories("default", "conv-job", "rh", "assistant", "u")
        assert (second["superseded"], second["added"]) == (1, 1)
        memory = RedisLongTermMemory(real_redis, max_memories=4)
        memory.recall("window seats", WHO, 1)  # used now: "Likes tea." is the least
        said(history, "I own a red bike.")
        assert extract_memories("default", "conv-job", "rh", "assistant", "u")["added"] == 1
    finally:
        configure_worker(None)
    records = memory.list(WHO)
    assert sorted(r.text for r in records) == [
        "Likes jazz.", "Lives in Porto.", "Owns a red bike.", "Prefers window seats."
    ]  # fmt: skip
    assert all(r.metadata["expires_ms"] - r.metadata["updated_ms"] == 60_000 for r in records)
    assert [r.text for r in memory.list(WHO, superseded=True)] == ["Lives in Lisbon."]


def test_find_names_the_live_memory_that_says_a_text(real_redis: redis.Redis) -> None:
    """By its normalized text, else (with an embedder) by the nearest restatement; never a
    superseded memory nor one that says something else."""
    memory = RedisLongTermMemory(real_redis, embedder=OfflineEmbedder())
    owner = {"agent_id": "assistant", "user_id": "u"}
    peanuts = memory.store("Is allergic to peanuts.", owner)
    lisbon = memory.store("Lives in Lisbon.", owner)
    found = memory.find("  is ALLERGIC to peanuts. ", WHO)
    assert found is not None
    assert (found.memory_id, found.text) == (peanuts, "Is allergic to peanuts.")
    restated = memory.find("Has a peanut allergy.", WHO)
    assert restated is not None
    assert restated.memory_id == peanuts
    assert memory.find("Likes jazz.", WHO) is None
    assert memory.find("Is allergic to peanuts.", MemoryFilters("assistant", "v")) is None
    memory.supersede(lisbon, "Lives in Porto.", owner)
    assert memory.find("Lives in Lisbon.", WHO) is None
