"""``redis-history export`` and ``import``: a lossless JSON Lines dump that reads back equal
(ids, roles, contents, tool calls, metadata, timestamps, transcript, token estimate,
compaction state, TTL), also after a compaction and on a cluster; imports that refuse to
overwrite, refuse a newer format and refuse bad input having written nothing."""

from __future__ import annotations

import dataclasses
import io
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from commands import run_cli
from redis.cluster import RedisCluster
from samples import turns

from redis_history import (
    CompactionPolicy,
    ConversationExistsError,
    DumpError,
    DumpVersionError,
    ExtractiveSummarizer,
    HistoryError,
    Message,
    RedisHistory,
    ToolCall,
)
from redis_history.admin import dump as dumps
from redis_history.admin.dump import (
    Dump,
    export_conversation,
    import_conversation,
    load_dump,
    read_dump,
    restore,
)
from redis_history.admin.target import Target
from redis_history.cli import main
from redis_history.compaction.run import run_compaction
from redis_history.limits import MAX_BATCH_MESSAGES
from redis_history.store import _staging as staging

pytestmark = pytest.mark.real_redis

POLICY = CompactionPolicy(soft_tokens=50, keep_last_turns=1, min_messages=2)


def rich(client: Any, conversation: str = "c", namespace: str = "t") -> RedisHistory:
    """A conversation with everything a message holds (tool calls with arguments, metadata,
    a name, timestamps in another zone and below a millisecond, non-ASCII text), compacted
    once so it has an archive and a summary, then a turn more, a reported token count, a TTL
    and a compaction state other than Ready."""
    history = RedisHistory(client, conversation, namespace=namespace, ttl=900)
    history.append_many(turns(5))
    history.append_many(
        [
            Message.user("¿Qué tal? 字 😀", name="ana", metadata={"lang": "es", "n": [1, 2.5]}),
            Message.assistant(
                "",
                tool_calls=[ToolCall(id="w1", name="weather", arguments={"city": "Évora"})],
                created_at=datetime(
                    2026, 1, 2, 3, 4, 5, 678_901, tzinfo=timezone(timedelta(hours=2))
                ),
            ),
            Message.tool('{"temp": 21}', tool_call_id="w1", metadata={"ms": 12}),
            Message.assistant("Sunny.", created_at=datetime(2026, 1, 2, tzinfo=UTC)),
        ]
    )
    assert run_compaction(history, ExtractiveSummarizer(), POLICY).status == "compacted"
    history.append(Message.user("and tomorrow?"))
    history.record_input_tokens(777)
    history.append(Message.assistant("Rain."))
    return history


def exported(history: RedisHistory) -> bytes:
    """The conversation's dump."""
    stream = io.BytesIO()
    export_conversation(Target(history.client, history.namespace), history.conversation_id, stream)
    return stream.getvalue()


def assert_equal_conversations(
    copy: RedisHistory, original: RedisHistory, *, replaced: bool = False
) -> None:
    """Everything a reader sees of the two is the same (but the version, when ``copy``
    replaced a conversation: it counts on from the replaced one's)."""
    assert copy.snapshot() == original.snapshot()  # ids, roles, contents, calls, metadata, times
    assert copy.entries() == original.entries()  # and the token counts and summary flags
    assert copy.transcript() == original.transcript()
    assert copy.token_estimate() == original.token_estimate()
    assert copy.compaction_status() == original.compaction_status()
    assert copy.compaction_stats() == original.compaction_stats()
    assert copy.ttl() == original.ttl()
    copied, kept = read_dump(copy), read_dump(original)
    assert (copied.live, copied.archive) == (kept.live, kept.archive)
    version = copied.meta.version if replaced else kept.meta.version
    assert copied.meta == dataclasses.replace(kept.meta, version=version)


def meta_fields(client: Any, history: RedisHistory) -> dict[str, Any]:
    """The meta hash's accounting and turn state, decoded (not its records of writes)."""
    records = (b"ops", b"opa", b"queued", b"queued_at")
    stored = client.hgetall(history.keys.meta).items()
    raw = {k.decode(): v.decode() for k, v in stored if k not in records}
    raw["open"] = json.loads(raw["open"]) if raw.get("open") else []
    return {k: v for k, v in raw.items() if v not in ("0", "")}


def test_a_compacted_conversation_reads_back_equal_in_another_namespace_and_id(
    real_redis: redis.Redis,
) -> None:
    """Export, import under another namespace and id: the copy reads back equal, its meta hash
    holds the same accounting and turn state, its keys the same TTL, and its own export is
    the same dump but for where it came from."""
    original = rich(real_redis)
    assert real_redis.llen(original.keys.archive) > 0, "compacted: there is an archive"
    data = exported(original)
    _, copy = import_conversation(Target(real_redis, "u"), io.BytesIO(data), "copy")
    assert (copy.namespace, copy.conversation_id) == ("u", "copy")
    assert_equal_conversations(copy, original)
    assert meta_fields(real_redis, copy) == meta_fields(real_redis, original)
    for key in copy.keys.data:
        assert 0 < real_redis.pttl(key) <= 900_000
    again = exported(copy).splitlines()
    first = data.splitlines()
    assert again[1:] == first[1:], "every entry line is the same"
    header, copied = json.loads(first[0]), json.loads(again[0])
    for name in ("namespace", "conversation_id", "exported_at"):
        del header[name], copied[name]
    assert copied == header
    assert not real_redis.keys("*:restore:*"), "no staging key is left behind"


def test_the_dump_is_json_lines_of_the_stored_envelopes(real_redis: redis.Redis) -> None:
    """A header counting what follows, then the archive and the live list, each line one
    envelope exactly as the store keeps it."""
    history = rich(real_redis)
    header, *lines = exported(history).splitlines()
    head = json.loads(header)
    assert head["format"] == "redis-history-dump"
    assert head["version"] == dumps.FORMAT_VERSION
    assert head["token_estimate"] == history.token_estimate()
    assert head["meta"]["baseline"] == 777
    assert head["meta"]["state"] == "compacted:2"
    archived = cast(list[bytes], real_redis.lrange(history.keys.archive, 0, -1))
    live = cast(list[bytes], real_redis.lrange(history.keys.msgs, 0, -1))
    assert head["archived"] == len(archived)
    assert head["messages"] == len(live)
    assert lines == [b'{"archived":' + e + b"}" for e in archived] + [
        b'{"live":' + e + b"}" for e in live
    ]


def test_a_round_trip_on_a_cluster(cluster_client: RedisCluster) -> None:
    """The import's staging keys share the conversation's hash tag, so its one script runs on
    a cluster too; the copy reads back equal."""
    original = rich(cluster_client, "c1")
    data = exported(original)
    _, copy = import_conversation(Target(cluster_client, "t"), io.BytesIO(data), "c2")
    assert_equal_conversations(copy, original)


def test_import_refuses_to_overwrite_without_replace(real_redis: redis.Redis) -> None:
    """An existing conversation is left alone unless the import replaces it; a replacing
    import takes its place whole, drops its compaction lock, claim and shared summaries, and
    moves its version past the replaced one's."""
    source = rich(real_redis, "src")
    data = exported(source)
    target = Target(real_redis, "t")
    existing = RedisHistory(real_redis, "dst", namespace="t")
    existing.append_many(turns(1))
    existing.replace(turns(2))
    existing.replace(turns(2))
    existing.replace(turns(2))
    real_redis.set(existing.keys.lock, "a-worker's-token")
    real_redis.hset(existing.keys.summaries, "live", "[1]")
    before = existing.snapshot()
    with pytest.raises(ConversationExistsError, match="import with replace"):
        import_conversation(target, io.BytesIO(data), "dst")
    assert existing.snapshot() == before
    assert real_redis.exists(existing.keys.summaries)
    _, copy = import_conversation(target, io.BytesIO(data), "dst", replace=True)
    assert_equal_conversations(copy, source, replaced=True)
    assert not real_redis.exists(existing.keys.lock)
    assert not real_redis.exists(existing.keys.summaries)
    assert int(real_redis.hget(existing.keys.meta, "version") or 0) == 4


def test_an_import_drops_summaries_left_from_before_in_its_own_script(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shared summaries outliving their conversation (their key has its own TTL) are not read
    as the imported conversation's: the restoring script deletes them as it puts the import
    in place, with no command of its own."""
    data = exported(rich(real_redis, "src"))
    leftover = RedisHistory(real_redis, "fresh", namespace="t")
    real_redis.hset(leftover.keys.summaries, "live", "[1]")
    sent: list[tuple[Any, ...]] = []
    execute: Any = real_redis.execute_command

    def watched(*args: Any, **options: Any) -> Any:
        sent.append(args)
        return execute(*args, **options)

    monkeypatch.setattr(real_redis, "execute_command", watched)
    _, copy = import_conversation(Target(real_redis, "t"), io.BytesIO(data), "fresh")
    monkeypatch.undo()
    assert copy.snapshot()
    assert not real_redis.exists(leftover.keys.summaries)
    assert not any(
        str(args[0]).upper() in {"DEL", "UNLINK"} and leftover.keys.summaries in args
        for args in sent
    )


def test_a_newer_format_is_refused_naming_the_versions(real_redis: redis.Redis) -> None:
    """A dump from a later format version is DumpVersionError (a DumpError, a ValueError), and
    nothing is written."""
    header, *rest = exported(rich(real_redis)).splitlines()
    newer = json.loads(header) | {"version": dumps.FORMAT_VERSION + 1}
    real_redis.flushall()
    with pytest.raises(DumpVersionError, match=f"format version {dumps.FORMAT_VERSION + 1}"):
        import_conversation(Target(real_redis, "t"), [json.dumps(newer).encode(), *rest])
    assert real_redis.dbsize() == 0


def bad_dumps(data: bytes) -> dict[str, list[bytes]]:
    """Ways a dump can be broken, by name."""
    header, *lines = data.splitlines()
    head = json.loads(header)
    live = next(i for i, line in enumerate(lines) if line.startswith(b'{"live"'))
    entry = json.loads(lines[-1])["live"]
    return {
        "empty": [],
        "not-json": [b"{not json"],
        "not-a-dump": [b'{"format": "something else", "version": 1}'],
        "truncated": [header, *lines[:-1]],
        "extra-line": [header, *lines, lines[-1]],
        "bad-line": [header, *lines[:-1], b'{"live": 1}'],
        "two-keys": [header, *lines[:-1], b'{"live": {}, "archived": {}}'],
        "archived-after-live": [header, *lines[: live - 1], *lines[live:], lines[live - 1]],
        "bad-role": [
            header,
            *lines[:-1],
            json.dumps({"live": {**entry, "m": {**entry["m"], "role": "boss"}}}).encode(),
        ],
        "lone-surrogate": [
            header,
            *lines[:-1],
            json.dumps({"live": {**entry, "m": {**entry["m"], "content": "\ud800"}}}).encode(),
        ],
        "bad-state": [
            json.dumps(head | {"meta": {**head["meta"], "state": "sleepy:1"}}).encode(),
            *lines,
        ],
        "bad-namespace": [json.dumps(head | {"namespace": "a{b}"}).encode(), *lines],
        "negative-ttl": [
            json.dumps(head | {"meta": {**head["meta"], "ttl_ms": -1}}).encode(),
            *lines,
        ],
    }


BROKEN = (
    "empty", "not-json", "not-a-dump", "truncated", "extra-line", "bad-line", "two-keys",
    "archived-after-live", "bad-role", "lone-surrogate", "bad-state", "bad-namespace",
    "negative-ttl",
)  # fmt: skip


@pytest.mark.parametrize("broken", BROKEN)
def test_bad_input_is_a_dump_error_and_writes_nothing(real_redis: redis.Redis, broken: str) -> None:
    """Each broken dump is refused with a DumpError (a ValueError) before anything is
    written."""
    data = exported(rich(real_redis))
    real_redis.flushall()
    dump = bad_dumps(data)
    assert set(dump) == set(BROKEN)
    with pytest.raises(DumpError) as refused:
        import_conversation(Target(real_redis, "t"), dump[broken])
    assert isinstance(refused.value, ValueError)
    assert real_redis.dbsize() == 0


def test_the_import_is_staged_in_chunks_within_the_write_limits(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No call of an import sends more entries than one write of the store may: with the
    limit lowered to 3, the live messages go in runs of at most 3, and still read back equal."""
    assert staging.MAX_BATCH_MESSAGES == MAX_BATCH_MESSAGES  # type: ignore[attr-defined]
    original = RedisHistory(real_redis, "c", namespace="t")
    original.append_many(turns(3))  # 13 messages
    data = exported(original)
    monkeypatch.setattr(staging, "MAX_BATCH_MESSAGES", 3)
    real_redis.config_resetstat()
    _, copy = import_conversation(Target(real_redis, "u"), io.BytesIO(data))
    assert real_redis.info("commandstats")["cmdstat_rpush"]["calls"] == 5
    assert_equal_conversations(copy, original)
    chunks = list(staging.chunks([b"x" * 10] * 7))
    assert [len(c) for c in chunks] == [3, 3, 1]
    monkeypatch.setattr(staging, "MAX_BATCH_BYTES", 25)
    assert [len(c) for c in staging.chunks([b"x" * 10] * 7)] == [2, 2, 2, 1]


def test_a_lost_stage_writes_nothing(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the staged data is gone before the script puts it in place (it expired), the import
    fails having written nothing, and leaves no staging key."""
    data = exported(rich(real_redis))
    real_redis.flushall()
    stage = dumps._stage

    def then_expire(
        history: RedisHistory, staged: tuple[str, str, str], *args: Any, **options: Any
    ) -> None:
        stage(history, staged, *args, **options)
        history.client.delete(staged[0])

    monkeypatch.setattr(dumps, "_stage", then_expire)
    with pytest.raises(HistoryError, match="staged data was gone"):
        import_conversation(Target(real_redis, "t"), io.BytesIO(data))
    assert real_redis.dbsize() == 0


def test_an_export_during_writes_is_of_one_moment(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that appends while the export reads makes it read again: the dump holds the
    append, and its header counts what it holds."""
    history = RedisHistory(real_redis, "c", namespace="t")
    history.append_many(turns(2))
    entries = RedisHistory.entries
    writes = iter([Message.user("meanwhile")])

    def entries_then_write(self: RedisHistory) -> Any:
        read = entries(self)
        for message in writes:
            RedisHistory(real_redis, "c", namespace="t").append(message)
        return read

    monkeypatch.setattr(RedisHistory, "entries", entries_then_write)
    dump = read_dump(history)
    assert [entry.message.content for entry in dump.live][-1] == "meanwhile"
    assert dump.meta.total == sum(entry.tokens for entry in dump.live)


def test_an_export_that_never_settles_fails(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation written between every two reads is not exported half-read."""
    history = RedisHistory(real_redis, "c", namespace="t")
    history.append_many(turns(1))
    entries = RedisHistory.entries

    def entries_then_write(self: RedisHistory) -> Any:
        read = entries(self)
        RedisHistory(real_redis, "c", namespace="t").record_input_tokens(len(read))
        return read

    monkeypatch.setattr(RedisHistory, "entries", entries_then_write)
    with pytest.raises(HistoryError, match="changed during each of 5 attempts"):
        read_dump(history)


def test_the_commands_export_to_a_file_and_import_from_stdin(
    real_redis: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """export -o writes the file; import - reads stdin; an existing one is exit 1 without
    --replace; a newer format and a missing file are exit 2; unknown is exit 3."""
    original = rich(real_redis)
    path = tmp_path / "c.jsonl"
    where = ["--redis-url", redis_url]
    assert main(["export", "c", "--namespace", "t", "-o", str(path), *where]) == 0
    assert load_dump(path.read_bytes().splitlines()).live == original.entries()
    imported = run_cli("import", "-", "--as", "c2", *where, stdin=path.read_text())
    assert imported.returncode == 0, imported.stderr
    assert "imported t/c2" in imported.stderr, "into the dump's namespace by default"
    assert_equal_conversations(RedisHistory(real_redis, "c2", namespace="t"), original)
    again = run_cli("import", str(path), "--as", "c2", *where)
    assert again.returncode == 1
    assert "the conversation exists" in again.stderr
    assert run_cli("import", str(path), "--as", "c2", "--replace", *where).returncode == 0
    header, *rest = path.read_bytes().splitlines()
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(b"\n".join([header.replace(b'"version":1', b'"version":2'), *rest]))
    refused = run_cli("import", str(newer), "--as", "c3", *where)
    assert refused.returncode == 2
    assert "format version 2" in refused.stderr
    assert run_cli("import", str(tmp_path / "none"), *where).returncode == 2
    unknown = tmp_path / "unknown.jsonl"
    assert run_cli("export", "nobody", "-o", str(unknown), *where).returncode == 3
    assert sorted(tmp_path.iterdir()) == [path, newer], "a failed export leaves no file"


def test_a_dump_holds_what_load_reads(real_redis: redis.Redis) -> None:
    """load_dump of what write_dump wrote is the same Dump."""
    history = rich(real_redis)
    dump = read_dump(history)
    stream = io.BytesIO()
    dumps.write_dump(dump, stream)
    loaded = load_dump(io.BytesIO(stream.getvalue()))
    assert isinstance(loaded, Dump)
    assert (loaded.live, loaded.archive, loaded.meta) == (dump.live, dump.archive, dump.meta)
    assert loaded.token_estimate == history.token_estimate()
    restored = restore(Target(real_redis, "v"), loaded)
    assert restored.conversation_id == "c"
