"""Large inline data of content parts is stored once per conversation, outside the message
list: the memory bound, every read, TTL, delete, export and import, a cluster, the limits."""

from __future__ import annotations

import asyncio
import functools
import io
import re
from collections.abc import Callable
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
    InvalidMediaError,
    LimitExceededError,
    Message,
    RedisHistory,
    ToolOutputElider,
    limits,
    run_compaction,
)
from redis_history.admin.dump import load_dump, read_dump, restore, write_dump
from redis_history.admin.target import Target
from redis_history.context.formats import render
from redis_history.parts import AudioPart, BlobsWanted, FilePart, ImagePart
from redis_history.store import blobs
from redis_history.wire.lane import send
from redis_history.wire.plans import drive


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


def test_chat_completions_carry_files_kept_outside_the_list(client: redis.Redis) -> None:
    """``snapshot_openai()`` renders a file whose data is kept outside the list as a
    ``file_data`` URL, as it renders an image's."""
    history = RedisHistory(client, "conv-file")
    sent = turn(1, piece(1))
    history.append_many(sent)
    assert history.snapshot_openai() == [m.to_openai() for m in sent]


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


# -- the accounting: what is still named -------------------------------------------------------


def piece(n: int, size: int = 4096) -> FilePart:
    """A distinct piece of inline data, kept outside the list (its bytes announce no type)."""
    return FilePart(data=n.to_bytes(4, "big") * (size // 4), media_type="application/octet-stream")


def named_data(history: RedisHistory) -> dict[str, bytes]:
    """The distinct data kept outside the list that the conversation's entries name, archived
    originals and live messages."""
    out = {}
    for message in history.transcript():
        for part in message.parts:
            data = getattr(part, "data", None)
            if data is not None and len(data) >= limits.BLOB_MIN_BYTES:
                out[blobs.digest(data)] = data
    return out


def stored_pieces(client: Any, history: RedisHistory) -> tuple[set[str], int]:
    """The digests of the data the meta hash holds, and its ``blobs`` count."""
    meta = client.hgetall(history.keys.meta)
    kept = {field[5:].decode() for field in meta if field.startswith(b"blob:")}
    return kept, int(meta.get(b"blobs", 0))


def assert_counted(client: Any, history: RedisHistory) -> None:
    """The meta hash holds exactly the data some entry names, and counts its bytes."""
    named = named_data(history)
    assert stored_pieces(client, history) == (set(named), sum(map(len, named.values())))


def turn(n: int, *parts: FilePart | ImagePart) -> list[Message]:
    return [Message.user([f"look {n}", *parts]), Message.assistant(f"seen {n}")]


def test_the_accounting_is_the_data_still_named(sync_client: Any) -> None:
    """Each rewrite that drops the last entry naming a piece (a splice's archive cap, a
    rollback, a truncate, a replace, a truncate to 0) deletes it and counts it out; a piece
    another entry (live or archived) still names stays. On fakeredis, Redis and a cluster."""
    history = RedisHistory(sync_client, "conv-counted")
    a, b, c, d, e = (piece(n) for n in range(5))
    one, two, three, four = turn(1, a), turn(2, b, a), turn(3, c), turn(4, d)
    for messages in (one, two, three, four):
        history.append_many(messages)
    assert_counted(sync_client, history)
    summary = Message.system("Summary: charts.", metadata={"summary": True})
    history.splice_prefix(2, summary)  # turn 1 archived: a is named there and by turn 2
    assert_counted(sync_client, history)
    assert stored_pieces(sync_client, history)[1] == 4 * 4096
    history.splice_prefix(3, Message.system("Summary 2."), archive_max_messages=1)
    assert_counted(sync_client, history)  # turns 1 and 2 capped away: a and b are gone
    assert stored_pieces(sync_client, history)[1] == 2 * 4096
    assert history.rollback(four) == 2  # d
    assert_counted(sync_client, history)
    history.append_many(turn(5, c, e))
    assert history.truncate(3) == 2  # c is still named by turn 3
    assert_counted(sync_client, history)
    assert history.truncate(1) == 2  # c is not
    assert_counted(sync_client, history)
    history.append_many(turn(6, e))
    history.replace(turn(7, e))
    assert_counted(sync_client, history)
    assert stored_pieces(sync_client, history)[1] == 4096
    history.truncate(0)
    history.append(Message.user("the archive's last entry names no piece"))
    assert_counted(sync_client, history)
    left = sync_client.hkeys(history.keys.meta)
    kept = (b"blob:", b"ref:", b"refs:", b"cblobs", b"cpieces")
    assert not [f for f in left if f.startswith(kept)]


def test_the_repair_of_a_lost_meta_hash_counts_the_new_list(client: redis.Redis) -> None:
    """``replace()`` on a conversation whose meta hash was lost counts the new list's data,
    which a later rewrite counts out again."""
    history = RedisHistory(client, "conv-repair")
    history.append_many(turn(1, piece(1)))
    client.delete(history.keys.meta)
    history.replace(turn(2, piece(2)))
    assert stored_pieces(client, history) == ({blobs.digest(piece(2).data or b"")}, 4096)
    history.truncate(0)
    assert stored_pieces(client, history) == (set(), 0)


@pytest.mark.real_redis
def test_images_fit_again_once_rewrites_drop_the_old(real_redis: redis.Redis) -> None:
    """A conversation at its 128 MiB of inline data refuses a new image; each rewrite that
    drops the last entry naming 20 MiB of it makes room for 20 MiB more, without a delete."""
    history = RedisHistory(real_redis, "conv-full")
    write = limits.MAX_WRITE_BLOB_BYTES
    sizes = [write] * (limits.MAX_CONVERSATION_BLOB_BYTES // write)
    sizes.append(limits.MAX_CONVERSATION_BLOB_BYTES % write)
    for n, size in enumerate(sizes):
        history.append_many(turn(n, piece(n, size)))
    image = ImagePart(data=noisy_png(20, 20, seed=3), media_type="image/png")
    assert len(image.data or b"") > limits.BLOB_MIN_BYTES

    def refused() -> bool:
        try:
            history.append_many(turn(99, image))
        except LimitExceededError:
            return True
        history.rollback(history.tail(2))
        return False

    assert refused()
    fresh = iter(range(100, 200))

    def refill() -> None:
        history.append_many(turn(next(fresh), piece(next(fresh), write)))
        assert stored_pieces(real_redis, history)[1] == limits.MAX_CONVERSATION_BLOB_BYTES
        assert refused()

    history.splice_prefix(2, Message.system("Summary."), archive_max_messages=1)
    refill()
    history.truncate(history.len() - 2)
    refill()
    history.rollback(history.tail(2))
    refill()
    history.replace(history.snapshot()[1:3])  # keeps one turn's 20 MiB (one write's most)
    assert_counted(real_redis, history)
    assert stored_pieces(real_redis, history)[1] == write
    assert not refused()
    history.truncate(0)
    assert stored_pieces(real_redis, history) == (set(), 0)


# -- reads: the digest checked, a piece deleted meanwhile read again ---------------------------


def test_a_piece_whose_bytes_were_altered_is_refused_on_read(client: Any) -> None:
    """Bytes that no longer match their digest are a ``CorruptHistoryError`` naming the
    conversation, from every read that meets them (a snapshot, the transcript, an export, a
    fork), never returned."""
    history = RedisHistory(client, "conv-altered")
    history.append_many(turn(1, piece(1)))
    field = blobs.FIELD + blobs.digest(piece(1).data or b"")
    altered = bytearray(client.hget(history.keys.meta, field) or b"")
    altered[100] ^= 1
    client.hset(history.keys.meta, field, bytes(altered))
    reads = (
        history.snapshot,
        history.transcript,
        history.snapshot_openai,
        lambda: read_dump(history),
        lambda: history.fork("conv-altered-fork", at=history.tail(1)[0].id),
    )
    for read in reads:
        with pytest.raises(CorruptHistoryError, match="does not match its digest") as caught:
            read()
        assert caught.value.conversation_id == "conv-altered"
    assert not client.exists(*RedisHistory(client, "conv-altered-fork").keys.all)


def test_a_piece_a_rewrite_deletes_during_a_read_is_read_again(client: redis.Redis) -> None:
    """A read that finds a piece its entries name deleted (a rewrite dropped its last entry
    between the list's read and the data's) reads the list again; one whose data is lost is
    a ``CorruptHistoryError`` after ``READ_ATTEMPTS`` reads."""
    history = RedisHistory(client, "conv-race")
    history.append_many(turn(1, piece(1)))
    call = history.core.messages()
    reply = send(client, call)  # the list, naming piece 1
    replaced = turn(2, piece(2))
    history.replace(replaced)  # piece 1 deleted before its data is read
    with pytest.raises(BlobsWanted) as wanted:
        call.parse(reply)
    assert drive(history.core.with_blobs(call, reply, wanted.value), history.execute) == replaced
    client.hdel(history.keys.meta, blobs.FIELD + blobs.digest(piece(2).data or b""))
    reads = 0
    execute = history.execute

    def counted(step: Any) -> Any:
        nonlocal reads
        reads += step.command[0] != "HMGET"
        return execute(step)

    reply = send(client, call)
    with pytest.raises(BlobsWanted) as wanted:
        call.parse(reply)
    with pytest.raises(CorruptHistoryError, match="missing"):
        drive(history.core.with_blobs(call, reply, wanted.value), counted)
    assert reads == blobs.READ_ATTEMPTS - 1  # made again, after the first


# -- data stored before pieces were counted -----------------------------------------------------


def as_stored_before(client: Any, history: RedisHistory) -> None:
    """Make the conversation what an earlier version wrote: envelopes whose heads name no
    pieces, and no count records."""
    for key in (history.keys.msgs, history.keys.archive):
        for i, envelope in enumerate(client.lrange(key, 0, -1)):
            old = re.sub(rb'^(\{"t":\d+,(?:"[xs]":1,)*)"b":"[0-9a-f]+",', rb"\1", envelope)
            client.lset(key, i, old)
    meta = history.keys.meta
    counts = [f for f in client.hkeys(meta) if f.startswith((b"ref", b"cblobs", b"cpieces"))]
    client.hdel(meta, *counts)


def digests(*numbers: int) -> set[str]:
    return {blobs.digest(piece(n).data or b"") for n in numbers}


def test_pieces_stored_before_they_were_counted_stay_and_read(client: redis.Redis) -> None:
    """A conversation written before pieces were counted reads as it did; its pieces stay
    (pinned, counted in ``blobs``) whatever rewrites drop, while pieces written since are
    counted and deleted; a fork keeps the old ones pinned, an import of an export counts
    them all."""
    history = RedisHistory(client, "conv-old")
    history.append_many(turn(1, piece(1)) + turn(2, piece(2)))
    history.splice_prefix(2, Message.system("Summary."))
    live, whole = history.snapshot(), history.transcript()
    as_stored_before(client, history)
    assert (history.snapshot(), history.transcript()) == (live, whole)
    third = turn(3, piece(2), piece(3))
    history.append_many(third)
    assert stored_pieces(client, history) == (digests(1, 2, 3), 3 * 4096)
    fork = history.fork("conv-old-fork", at=history.tail(1)[0].id)
    stream = io.BytesIO()
    write_dump(read_dump(history), stream)
    copy = restore(Target(client), load_dump(stream.getvalue().splitlines()), "conv-old-copy")
    assert client.hget(fork.keys.meta, "cblobs") == b"4096"  # piece 3's; 1 and 2 pinned
    assert client.hget(copy.keys.meta, "cblobs") == b"12288"
    history.truncate(0)  # piece 3 is named by no entry; 1 and 2 are pinned
    assert stored_pieces(client, history) == (digests(1, 2), 2 * 4096)
    assert history.transcript() == whole[:2]
    assert fork.snapshot() == live + third
    fork.truncate(0)
    assert stored_pieces(client, fork) == (digests(1, 2), 2 * 4096)
    copy.truncate(0)  # imported with counts: only what the archive names stays
    assert_counted(client, copy)
    assert stored_pieces(client, copy) == (digests(1), 4096)


# -- media types their bytes contradict -----------------------------------------------------------


def keys_dumped(client: Any) -> dict[bytes, Any]:
    """Every key's content (a hash's as a dict: a hash table's order may change on a read)."""
    kinds = {b"hash": client.hgetall, b"list": lambda key: client.lrange(key, 0, -1)}
    return {key: kinds.get(client.type(key), client.dump)(key) for key in client.keys("*")}


@pytest.mark.real_redis
def test_a_mislabeled_part_is_refused_by_every_write_having_written_nothing(
    real_redis: redis.Redis, big_png: bytes
) -> None:
    """PNG bytes given as ``image/jpeg`` by a part built without validation (validation
    refuses them, ``tests/test_media.py``) are refused by every write with
    ``InvalidMediaError``, inline or kept outside the list, and nothing is written."""
    history = RedisHistory(real_redis, "conv-mislabeled")
    history.append_many(turn(1, piece(1)))
    before = keys_dumped(real_redis)
    for data in (noisy_png(8, 8), big_png):
        wrong = ImagePart.model_construct(data=data, media_type="image/jpeg")
        message = Message.user(["what is this?", ImagePart(data=data, media_type="image/png")])
        message.__dict__["parts"] = (message.parts[0], wrong)
        writes: tuple[Callable[[Message], object], ...] = (
            history.append,
            lambda m: history.append_many([m, Message.assistant("a chart")]),
            lambda m: history.replace([m, Message.assistant("a chart")]),
            lambda m: history.splice_prefix(2, m),
        )
        for write in writes:
            with pytest.raises(InvalidMediaError, match="'image/jpeg', but its data is image/png"):
                write(message)
    assert keys_dumped(real_redis) == before


@pytest.mark.real_redis
def test_parts_stored_mislabeled_before_read_as_what_their_bytes_are(
    real_redis: Any, big_png: bytes
) -> None:
    """A part stored with a media type its bytes contradict (before writes refused that) reads
    with the type the bytes announce, inline or kept outside the list: it renders as what it
    is and is written back."""
    history = RedisHistory(real_redis, "conv-labels")
    small = noisy_png(8, 8)
    for data in (small, big_png):
        history.append_many(turn(0, ImagePart(data=data, media_type="image/png")))
    for i, envelope in enumerate(real_redis.lrange(history.keys.msgs, 0, -1)):
        real_redis.lset(history.keys.msgs, i, envelope.replace(b'"image/png"', b'"image/jpeg"'))
    assert b"image/jpeg" in real_redis.lindex(history.keys.msgs, 2)  # as stored then
    read = history.snapshot()
    images = [part for message in read for part in message.parts if isinstance(part, ImagePart)]
    assert [(part.data, part.media_type) for part in images] == [
        (small, "image/png"),
        (big_png, "image/png"),
    ]
    request = render(read, "anthropic")
    sent = [
        block for m in request["messages"] for block in m["content"] if block["type"] == "image"
    ]
    assert [block["source"]["media_type"] for block in sent] == ["image/png", "image/png"]
    history.replace(read)
    assert b"image/jpeg" not in b"".join(real_redis.lrange(history.keys.msgs, 0, -1))
    assert history.snapshot() == read


# -- the work of a call at the limits -----------------------------------------------------------


def work(client: redis.Redis, call: Any) -> dict[str, int]:
    """The hash commands the server ran for ``call`` (those of its scripts included), by
    name, from ``INFO commandstats``."""
    client.config_resetstat()
    call()
    stats = client.info("commandstats")
    names = ("hmget", "hset", "hdel", "hexists", "hget", "hincrby")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names}


def chunks_of(fields: int) -> int:
    """Commands of at most 1,000 values (``lua/includes/blobs.lua``)."""
    return -(-fields // 1000)


@pytest.mark.real_redis
@pytest.mark.slow
def test_the_blob_work_of_each_call_is_bounded_at_the_limits(real_redis: redis.Redis) -> None:
    """At ``MAX_CONVERSATION_BLOBS`` pieces of 1 KiB, written ``MAX_WRITE_BLOBS`` a call, each
    call's hash commands are what ``lua/includes/blobs.lua`` counts: one record read per
    piece touched and one write per changed or new one, 1,000 values a command, two deletes
    per piece dropped; so a call does at most 4,096 pieces' worth of storing (about 9 µs of
    the server's CPU apiece here) or 8,192 pieces' of counting (about 4 µs). Past either
    limit a write is refused, having written nothing."""
    history = RedisHistory(real_redis, "conv-many")
    most, per_write = limits.MAX_CONVERSATION_BLOBS, limits.MAX_WRITE_BLOBS

    def tiny(start: int, n: int) -> list[Message]:
        out: list[Message] = []
        for first in range(start, start + n, 256):
            parts = [piece(i, 1024) for i in range(first, min(start + n, first + 256))]
            out += [Message.user(parts), Message.assistant("ok")]
        return out

    with pytest.raises(LimitExceededError, match="pieces of inline data in one write"):
        history.append_many(tiny(0, per_write + 1))
    start_turn = [Message.user("hello"), Message.assistant("hi")]
    history.append_many(start_turn)  # a staged append onto an empty list is sent twice
    for start in range(0, most, per_write):
        done = work(real_redis, functools.partial(history.append_many, tiny(start, per_write)))
        new_fields = 4 * per_write  # the data and the record of each, names and values
        assert done["hset"] <= chunks_of(new_fields) + 2  # the lists and sums, the records
        assert done["hmget"] <= chunks_of(per_write) + 2  # and the sums, and the meta
        assert done["hexists"] == 0  # no piece stored before pieces were counted
    before = keys_dumped(real_redis)
    with pytest.raises(LimitExceededError, match="pieces of inline data"):
        history.append_many(tiny(most, 1))
    assert keys_dumped(real_redis) == before
    assert real_redis.hget(history.keys.meta, "cpieces") == str(most).encode()

    fork = history.fork("conv-many-fork", at=history.tail(1)[0].id)  # its records staged
    assert stored_pieces(real_redis, fork) == stored_pieces(real_redis, history)
    length = history.len()
    done = work(real_redis, lambda: history.splice_prefix(length, Message.system("s")))
    assert done["hmget"] <= chunks_of(most) + 3  # every piece moved to the archive's count
    assert done["hset"] <= chunks_of(2 * most) + 2
    done = work(
        real_redis,
        lambda: history.splice_prefix(1, Message.system("t"), archive_max_messages=1),
    )
    assert done["hmget"] <= chunks_of(most) + 3
    assert done["hdel"] <= chunks_of(2 * most) + 4  # every piece deleted, its data and record
    assert stored_pieces(real_redis, history) == (set(), 0)
    for kind in ("replace", "truncate"):
        history.replace(start_turn)
        for start in range(0, most, per_write):
            history.append_many(tiny(start, per_write))
        sweep = (
            (lambda: history.replace([Message.user("x")]))
            if kind == "replace"
            else (lambda: history.truncate(0))
        )
        done = work(real_redis, sweep)  # every count of the list read, every piece deleted
        assert done["hmget"] <= chunks_of(most) + 3
        assert done["hdel"] <= chunks_of(2 * most) + 4
        assert done["hset"] <= 3
        assert stored_pieces(real_redis, history) == (set(), 0)
    fork.delete()
