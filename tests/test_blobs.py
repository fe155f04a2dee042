"""Large inline data of content parts is stored once per conversation, outside the message
list: the memory bound, every read, TTL, delete, export and import, a cluster, the limits."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
import redis
import redis.asyncio
from PIL import Image
from redis.cluster import RedisCluster

from redis_history import (
    AsyncRedisHistory,
    CompactionPolicy,
    CorruptHistoryError,
    ExtractiveSummarizer,
    LimitExceededError,
    Message,
    RedisHistory,
    ToolOutputElider,
    limits,
    run_compaction,
)
from redis_history.admin.dump import load_dump, read_dump, restore, write_dump
from redis_history.admin.target import Target
from redis_history.parts import AudioPart, FilePart, ImagePart
from redis_history.store import blobs


def noisy_png(width: int, height: int, seed: int = 0) -> bytes:
    """A PNG that does not compress: about 3 bytes a pixel."""
    image = Image.effect_noise((width, height), 64 + seed).convert("RGB")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def big_png() -> bytes:
    """About 2.4 MB of image."""
    data = noisy_png(1000, 800)
    assert 2_000_000 < len(data) < 3_000_000
    return data


def conversation_bytes(client: redis.Redis, history: RedisHistory) -> int:
    return sum(client.memory_usage(key) or 0 for key in history.keys.all if client.exists(key))


def image_turns(history: Any, image: bytes, turns: int = 5) -> list[Message]:
    sent = []
    for i in range(turns):
        user = Message.user(
            [f"Is this the same chart? ({i})", ImagePart(data=image, media_type="image/png")]
        )
        sent += [user, Message.assistant("Yes, the same chart.")]
    for i in range(0, len(sent), 2):
        history.append(sent[i])
        history.append(sent[i + 1])
    return sent


@pytest.mark.real_redis
def test_an_image_in_five_messages_is_stored_once(real_redis: redis.Redis, big_png: bytes) -> None:
    """Five messages with one 2.4 MB image grow Redis by less than twice its size, and the
    message list stays small; every message reads back with the image."""
    history = RedisHistory(real_redis, "conv-images")
    sent = image_turns(history, big_png)
    assert conversation_bytes(real_redis, history) < 2 * len(big_png)
    listed = sum(map(len, real_redis.lrange(history.keys.msgs, 0, -1)))
    assert listed < 5_000
    assert history.snapshot() == sent
    assert real_redis.hget(history.keys.meta, "blobs") == str(len(big_png)).encode()


@pytest.mark.real_redis
def test_every_read_gives_the_data_back(real_redis: redis.Redis, big_png: bytes) -> None:
    history = RedisHistory(real_redis, "conv-reads")
    sent = image_turns(history, big_png, turns=3)
    assert [entry.message for entry in history.entries()] == sent
    assert history.snapshot_openai() == [m.to_openai() for m in sent]
    assert history.tail(2) == sent[-2:]
    assert history.range(1, 3) == sent[1:3]
    assert [m for turn in history.turns() for m in turn.to_messages()] == sent
    history.splice_prefix(
        2, Message.system("Summary: a chart was compared.", metadata={"summary": True})
    )
    assert history.transcript()[:2] == sent[:2]  # the archived originals keep their images
    assert history.rollback(sent[-2:]) == 2
    assert history.snapshot()[-2:] == sent[2:4]  # data shared with a rolled-back message


@pytest.mark.real_redis
def test_small_data_stays_in_the_envelope(real_redis: redis.Redis) -> None:
    history = RedisHistory(real_redis, "conv-small")
    tiny = noisy_png(8, 8)
    assert len(tiny) < limits.BLOB_MIN_BYTES
    message = Message.user(["icon", ImagePart(data=tiny, media_type="image/png")])
    history.append(message)
    assert real_redis.hget(history.keys.meta, "blobs") is None
    assert history.snapshot() == [message]


@pytest.mark.real_redis
def test_a_replayed_append_counts_its_data_once(real_redis: redis.Redis, big_png: bytes) -> None:
    history = RedisHistory(real_redis, "conv-replay")
    message = Message.user(["again", ImagePart(data=big_png, media_type="image/png")])
    history.append(message)
    history.append(message)  # a retry: applied once
    other = Message.user(["file", FilePart(data=big_png, media_type="image/png")])
    history.replace([message, Message.assistant("ok"), other])  # the same data, once more
    assert real_redis.hget(history.keys.meta, "blobs") == str(len(big_png)).encode()
    assert history.snapshot()[2] == other


@pytest.mark.real_redis
def test_the_data_follows_the_conversation_ttl_and_delete(
    real_redis: redis.Redis, big_png: bytes
) -> None:
    history = RedisHistory(real_redis, "conv-ttl", ttl=600)
    image_turns(history, big_png, turns=1)
    assert 0 < real_redis.pttl(history.keys.meta) <= 600_000  # the blobs live in the meta hash
    assert history.delete()
    assert real_redis.keys("*") == []


@pytest.mark.real_redis
def test_export_and_import_carry_the_data(real_redis: redis.Redis, big_png: bytes) -> None:
    history = RedisHistory(real_redis, "conv-export")
    sent = image_turns(history, big_png, turns=2)
    history.splice_prefix(2, Message.system("Summary.", metadata={"summary": True}))
    stream = io.BytesIO()
    write_dump(read_dump(history), stream)
    dump = load_dump(stream.getvalue().splitlines())
    copy = restore(Target(real_redis), dump, "conv-imported")
    assert copy.snapshot() == history.snapshot()
    assert copy.transcript() == history.transcript()
    assert copy.transcript()[:2] == sent[:2]
    assert real_redis.hget(copy.keys.meta, "blobs") == str(len(big_png)).encode()


@pytest.mark.real_redis
def test_over_the_limits_is_refused_and_nothing_written(real_redis: redis.Redis) -> None:
    history = RedisHistory(real_redis, "conv-limits")
    huge = b"\x89PNG\r\n\x1a\n" + bytes(limits.MAX_BLOB_BYTES)
    with pytest.raises(LimitExceededError, match="MAX_BLOB_BYTES"):
        history.append(Message.user(["huge", FilePart(data=huge, media_type="image/png")]))
    assert real_redis.keys("*") == []
    history.append(Message.user("hello"))
    real_redis.hset(history.keys.meta, "blobs", limits.MAX_CONVERSATION_BLOB_BYTES - 100)
    before = {key: real_redis.dump(key) for key in real_redis.keys("*")}
    pdf = b"%PDF-1.7\n" + bytes(5000)
    with pytest.raises(LimitExceededError, match="inline data"):
        history.append(Message.user(["doc", FilePart(data=pdf, media_type="application/pdf")]))
    assert {key: real_redis.dump(key) for key in real_redis.keys("*")} == before


@pytest.mark.real_redis
def test_a_missing_blob_is_a_corrupt_history_error(real_redis: redis.Redis, big_png: bytes) -> None:
    history = RedisHistory(real_redis, "conv-missing")
    image_turns(history, big_png, turns=1)
    real_redis.hdel(history.keys.meta, blobs.FIELD + blobs.digest(big_png))
    with pytest.raises(CorruptHistoryError, match="missing"):
        history.snapshot()


@pytest.mark.real_redis
def test_blobs_on_a_cluster_and_from_asyncio(
    cluster_client: RedisCluster, redis_url: str, real_redis: redis.Redis, big_png: bytes
) -> None:
    """On a cluster the data shares the conversation's slot; an asyncio history writes and
    reads it the same way."""
    history = RedisHistory(cluster_client, "conv-cluster")
    sent = image_turns(history, big_png, turns=2)
    assert history.snapshot() == sent
    audio = Message.user(["listen", AudioPart(data=b"RIFF" + bytes(4000), format="wav")])

    async def asyncio_pod() -> list[Message]:
        client = redis.asyncio.Redis.from_url(redis_url)
        ahistory = AsyncRedisHistory(client, "conv-async")
        await ahistory.append_many([audio, Message.assistant("A beep.")])
        await ahistory.append(
            Message.user(["and this", ImagePart(data=big_png, media_type="image/png")])
        )
        read = await ahistory.snapshot()
        await client.aclose()
        return read

    read = asyncio.run(asyncio_pod())
    assert read[0] == audio
    assert read[2].parts[1] == ImagePart(data=big_png, media_type="image/png")


@pytest.mark.real_redis
@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_a_fork_copies_the_data_its_messages_name(
    where: str, request: pytest.FixtureRequest, big_png: bytes
) -> None:
    """A fork holds the data of the messages it copies, in its own meta hash (another slot
    on a cluster), and not that of the messages it leaves out."""
    client: Any = request.getfixturevalue("real_redis" if where == "redis" else "cluster_client")
    source = RedisHistory(client, "conv-source")
    sent = image_turns(source, big_png, turns=1)
    other = noisy_png(300, 200, seed=1)
    source.append_many(
        [
            Message.user(["and this", ImagePart(data=other, media_type="image/png")]),
            Message.assistant("no"),
        ]
    )
    fork = source.fork("conv-fork", at=sent[-1].id)
    assert fork.snapshot() == sent
    assert client.hget(fork.keys.meta, "blobs") == str(len(big_png)).encode()
    assert client.hexists(fork.keys.meta, blobs.FIELD + blobs.digest(other)) == 0
    source.delete()
    assert fork.snapshot() == sent  # the fork's own copy


def test_the_elider_replaces_old_images_by_stand_ins(sync_client: Any, big_png: bytes) -> None:
    """``ToolOutputElider(images=True)`` replaces the images of the turns before the kept
    tail by text stand-ins, written back by the splice; the transcript keeps the originals
    with their data, and the tail keeps its image. On Redis, a cluster and fakeredis."""
    history = RedisHistory(sync_client, "conv-elide")
    history.append(Message.system("You compare charts."))
    sent = image_turns(history, big_png, turns=3)
    policy = CompactionPolicy(soft_tokens=50, keep_last_turns=1, min_messages=2)
    result = run_compaction(
        history, ExtractiveSummarizer(), policy, compactor=ToolOutputElider(images=True)
    )
    assert result.status == "compacted"
    after = history.snapshot()
    assert [m.id for m in after[1:]] == [m.id for m in sent]
    old = after[1]
    assert [p.type for p in old.parts] == ["text", "text"]
    assert old.readable.startswith("Is this the same chart? (0)[image: image/png, 2.")
    assert old.metadata["elided"] == {"parts": 1}
    assert after[-2] == sent[-2]  # the tail keeps its image
    assert history.transcript()[1:3] == sent[:2]
    assert result.tokens_freed > 2 * 200  # two images of the old turns no longer priced
