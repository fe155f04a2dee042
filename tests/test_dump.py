"""``redis-history export`` and ``import``: a lossless JSON Lines dump that reads back equal
(ids, roles, contents, tool calls, metadata, timestamps, transcript, token estimate,
compaction state, TTL), also after a compaction and on a cluster; imports that refuse to
overwrite, refuse a newer format and refuse bad input having written nothing."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from commands import cli
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
    check_dump,
    export_conversation,
    import_conversation,
    load_dump,
    read_dump,
    restore,
)
from redis_history.admin.target import Target
from redis_history.cli import main
from redis_history.compaction.run import run_compaction
from redis_history.compaction_state import CompactionState
from redis_history.limits import MAX_BATCH_MESSAGES, MAX_TOKENS, MAX_TTL_SECONDS
from redis_history.parts import FilePart
from redis_history.roles import RoleState
from redis_history.store import staging
from redis_history.store.core import MAX_STATE_VALUE

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
    imported = cli("import", "-", "--as", "c2", *where, stdin=path.read_text())
    assert imported.returncode == 0, imported.stderr
    assert "imported t/c2" in imported.stderr, "into the dump's namespace by default"
    assert_equal_conversations(RedisHistory(real_redis, "c2", namespace="t"), original)
    again = cli("import", str(path), "--as", "c2", *where)
    assert again.returncode == 1
    assert "the conversation exists" in again.stderr
    assert cli("import", str(path), "--as", "c2", "--replace", *where).returncode == 0
    header, *rest = path.read_bytes().splitlines()
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(b"\n".join([header.replace(b'"version":1', b'"version":2'), *rest]))
    refused = cli("import", str(newer), "--as", "c3", *where)
    assert refused.returncode == 2
    assert "format version 2" in refused.stderr
    assert cli("import", str(tmp_path / "none"), *where).returncode == 2
    unknown = tmp_path / "unknown.jsonl"
    assert cli("export", "nobody", "-o", str(unknown), *where).returncode == 3
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


# -- what an import checks ---------------------------------------------------------------------


def keyspace(client: Any) -> dict[bytes, bytes | None]:
    """Every key of the server and its DUMP: what a refused import must leave as it was."""
    return {key: client.dump(key) for key in sorted(client.keys("*"))}


def envelope(role: str, content: str = "x", tokens: int = 5, **fields: Any) -> dict[str, Any]:
    """A stored envelope as a dump line holds it: ``fields`` go into the message, ``s`` (a
    summary) and ``t`` beside it."""
    summary = fields.pop("s", 0)
    message = {"id": f"m{next(_SERIAL)}", "role": role, "content": content, "at": 1, **fields}
    return {"t": tokens, **({"s": 1} if summary else {}), "m": message}


_SERIAL = iter(range(10**9))


def call(id_: str) -> dict[str, Any]:
    """An assistant envelope calling one tool."""
    return envelope("assistant", "", tool_calls=[{"id": id_, "name": "f"}])


def result(id_: str) -> dict[str, Any]:
    """A tool result envelope answering ``id_``."""
    return envelope("tool", "r", tool_call_id=id_)


def dump_lines(
    live: list[dict[str, Any]],
    archived: list[dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    header: dict[str, Any] | None = None,
    **meta: Any,
) -> list[bytes]:
    """A dump of ``live`` and ``archived`` whose header agrees with them (counts, total, token
    estimate), then ``meta`` put in its accounting and ``header`` in the header as given."""
    fields: dict[str, Any] = {
        "total": sum(entry["t"] for entry in live), "baseline": None, "mark": None,
        "version": 0, "ttl_ms": 0, "archive_dropped": 0, "state": "ready:0",
        "compactions": 0, "tokens_freed": 0,
    }  # fmt: skip
    fields.update(meta)
    total, baseline, mark = fields["total"], fields["baseline"], fields["mark"]
    estimate = (total if baseline is None else baseline + total - (mark or 0)) if total else None
    head = {
        "format": "redis-history-dump", "version": 1, "namespace": "t",
        "conversation_id": "imported", "exported_at": "2026-11-28T10:00:00.000+00:00",
        "messages": len(live), "archived": len(archived), "token_estimate": estimate,
        "meta": fields, **(header or {}),
    }  # fmt: skip
    return [
        json.dumps(head).encode(),
        *(json.dumps({"archived": entry}).encode() for entry in archived),
        *(json.dumps({"live": entry}).encode() for entry in live),
    ]


def turn(n: int = 0) -> list[dict[str, Any]]:
    """A user message, a tool call and its result, and the answer."""
    return [envelope("user"), call(f"c{n}"), result(f"c{n}"), envelope("assistant")]


SYSTEM_AND_TURN = [envelope("system"), *turn()]


def deep(levels: int) -> Any:
    """A JSON value nested ``levels`` deep."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def hostile_dumps() -> dict[str, tuple[Sequence[bytes | str], int, str]]:
    """Dumps the store must refuse, by name: the lines, the line the refusal names, and a
    pattern of what it says."""
    ok = dump_lines(SYSTEM_AND_TURN)
    head = json.loads(ok[0])
    meta = head["meta"]
    last = 2 + len(SYSTEM_AND_TURN) - 1  # the line of the last entry

    def with_header(**fields: Any) -> list[bytes]:
        return [json.dumps(head | fields).encode(), *ok[1:]]

    def with_meta(**fields: Any) -> list[bytes]:
        return with_header(meta=meta | fields)

    def with_last(line: bytes) -> list[bytes]:
        return [*ok[:-1], line]

    summary = envelope("system", "Summary", s=1)
    too_big = envelope("assistant", tokens=10**20)
    return {
        # role order and tool pairing, as every write checks them
        "system-after-user": (dump_lines([*turn(), envelope("system")]), 6, "may only come first"),
        "orphan-result": (dump_lines([*turn(), result("nope")]), 6, "answers no open tool call"),
        "user-while-calls-open": (
            dump_lines([envelope("user"), call("c1"), envelope("user")]),
            4,
            "unanswered",
        ),
        "assistant-first": (dump_lines([envelope("assistant")]), 2, "may not follow nothing"),
        "answered-twice": (
            dump_lines([envelope("user"), call("c1"), result("c1"), result("c1")]),
            5,
            "answers no open tool call",
        ),
        "system-after-summaries": (dump_lines([summary, envelope("system")]), 3, "summaries"),
        "orphan-after-summaries": (dump_lines([summary, result("c9")]), 3, "no open tool call"),
        "summaries-leave-calls-open": (
            dump_lines([summary, {**call("c1"), "s": 1}, envelope("user")]),
            4,
            "unanswered",
        ),
        # the accounting against the entries
        "total-disagrees": (dump_lines(SYSTEM_AND_TURN, total=5), 1, "add up to"),
        "mark-over-total": (
            dump_lines(SYSTEM_AND_TURN, baseline=10, mark=10**12),
            1,
            "mark .* is over its total",
        ),
        "baseline-without-mark": (dump_lines(SYSTEM_AND_TURN, baseline=10), 1, "without its"),
        "mark-without-baseline": (dump_lines(SYSTEM_AND_TURN, mark=3), 1, "without its"),
        "estimate-disagrees": (with_header(token_estimate=1), 1, "token_estimate is 1"),
        "huge-token-count": (dump_lines([*turn()[:3], too_big], total=20), 5, "over MAX_TOKENS"),
        "negative-token-count": (
            dump_lines([envelope("user", tokens=-1)], total=0),
            2,
            "not a message",
        ),
        "total-over-the-limit": (
            dump_lines(
                [envelope("user", tokens=6 * 10**11), envelope("assistant", tokens=10**12)],
                total=5,
            ),
            3,
            "add up to more than MAX_TOKENS",
        ),
        "version-too-large": (with_meta(version=10**13), 1, "version"),
        "archive-dropped-too-large": (with_meta(archive_dropped=2**53), 1, "archive_dropped"),
        "compactions-too-large": (with_meta(compactions=10**20), 1, "compactions"),
        "freed-too-large": (with_meta(tokens_freed=10**13), 1, "tokens_freed"),
        "cooling-0": (with_meta(state="cooling:0"), 1, "not one compaction reaches"),
        "ready-3": (with_meta(state="ready:3"), 1, "not one compaction reaches"),
        "exhausted-2": (with_meta(state="exhausted:2"), 1, "not one compaction reaches"),
        "cooldown-too-long": (with_meta(state="compacted:16777216"), 1, "not one compaction"),
        "cooldown-huge": (with_meta(state=f"cooling:{10**20}"), 1, "not one compaction reaches"),
        "unknown-header-field": (with_header(note="x"), 1, "'note'"),
        "unknown-meta-field": (with_meta(cstate="ready:0"), 1, "'cstate'"),
        # hostile JSON
        "deep-line": (
            with_last(b'{"live":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
            last,
            "nests",
        ),
        "deep-header": (
            [
                b'{"format":"redis-history-dump","version":1,"meta":'
                + b"[" * 10**5
                + b"]" * 10**5
                + b"}"
            ],
            1,
            "nests",
        ),
        "deep-metadata": (
            dump_lines([envelope("user", metadata={"a": deep(150)})]),
            2,
            "nests deeper",
        ),
        "nan": (with_last(ok[-1].replace(b'"t": 5', b'"t": NaN')), last, "not JSON"),
        "infinity": (with_last(ok[-1].replace(b'"t": 5', b'"t": -Infinity')), last, "not JSON"),
        "huge-exponent": (
            with_last(ok[-1].replace(b'"at": 1', b'"at": 1e400')),
            last,
            "too large for a double",
        ),
        "not-utf8-entry": (with_last(ok[-1].replace(b'"x"', b'"\xff\xfe"')), last, "not JSON"),
        "not-utf8-header": ([ok[0].replace(b'"t"', b'"\xc3"'), *ok[1:]], 1, "not JSON"),
        "text-not-utf8": (['{"format": "\udcff"}'], 1, "lone surrogate"),
        "at-overflows": (with_last(ok[-1].replace(b'"at": 1', b'"at": ' + b"9" * 40)), last, "at"),
        "total-is-text": (with_meta(total="15"), 1, "not an integer"),
        "total-is-float": (with_meta(total=15.0), 1, "not an integer"),
        "state-is-number": (with_meta(state=5), 1, "not a string"),
        "meta-is-a-list": (with_header(meta=[1]), 1, "not an object"),
        "messages-is-true": (with_header(messages=True), 1, "not an integer"),
        "ttl-is-null": (with_meta(ttl_ms=None), 1, "not an integer"),
        "baseline-is-float": (with_meta(baseline=1.5, mark=1), 1, "not an integer"),
        "entry-is-a-number": (with_last(b'{"live": 5}'), last, "not a message"),
        "blob-reference": (
            dump_lines(
                [envelope("user", content="", parts=[{"type": "file", "blob": "ab" * 16 + ":9"}])]
            ),
            2,
            "not a message",
        ),
    }


HOSTILE = tuple(hostile_dumps())


@pytest.mark.parametrize("name", HOSTILE)
def test_a_dump_the_store_would_refuse_is_refused_naming_its_line_and_nothing_is_written(
    real_redis: redis.Redis, redis_url: str, tmp_path: Path, name: str
) -> None:
    """Each dump is refused with a DumpError (a ValueError) naming the line at fault and
    saying why, before anything is written (every key's DUMP is as it was, another
    conversation's included); the command exits 2 with one line, no traceback."""
    lines, line, why = hostile_dumps()[name]
    RedisHistory(real_redis, "other", namespace="t").append_many(turns(1))
    before = keyspace(real_redis)
    with pytest.raises(DumpError, match=why) as refused:
        import_conversation(Target(real_redis, "t"), lines)
    assert refused.value.line == line
    assert isinstance(refused.value, ValueError)
    assert keyspace(real_redis) == before
    path = tmp_path / "dump.jsonl"
    path.write_bytes(b"\n".join(as_bytes(line) for line in lines))
    assert main(["import", str(path), "--redis-url", redis_url]) == 2
    assert keyspace(real_redis) == before


def as_bytes(line: bytes | str) -> bytes:
    """A line as a file holds it (a lone surrogate as the byte it escapes)."""
    return line.encode("utf-8", "surrogateescape") if isinstance(line, str) else line


def every_later_call_works(history: RedisHistory) -> None:
    """Estimate, export, append (answering any calls left open), record the input tokens,
    roll back, truncate, splice, advance the compaction state, read the transcript: each
    works, and after each the meta hash's total is the live entries' and the estimate is
    what the accounting gives."""

    def consistent() -> None:
        dump = read_dump(history)  # the export
        assert dump.meta.total == sum(entry.tokens for entry in dump.live)
        assert history.token_estimate() == dump.meta.token_estimate
        originals = [entry.message for entry in dump.live if not entry.summary]
        assert history.transcript()[len(history.transcript()) - len(originals) :] == originals

    consistent()
    history.compaction_status()
    history.compaction_stats()
    state = RoleState.of(history.snapshot())
    replies = [Message.tool("done", tool_call_id=open_call) for open_call in state.open]
    if (replies[-1].role if replies else state.role) in ("user", "tool"):
        replies.append(Message.assistant("ok"))
    replies += [Message.user("next?"), Message.assistant("next.")]
    history.append_many(replies)
    consistent()
    history.record_input_tokens(1_234)
    consistent()
    assert history.rollback([replies[-1].id]) == 1
    consistent()
    assert history.truncate(history.len() - 1) == 1
    consistent()
    spliced = min(1, history.len())
    assert history.splice_prefix(1, Message.system("Summary."), archive_max_messages=2) == spliced
    consistent()
    history.advance_turn()
    consistent()


def accepted_dumps(client: Any) -> dict[str, list[bytes]]:
    """Dumps an import takes, by name: exported conversations the store's writes made (one
    compacted, one spliced inside a turn, one waiting for a tool), and dumps at the limits
    and at the edges of the role rules."""
    spliced = RedisHistory(client, "spliced", namespace="src")
    spliced.append_many(turns(3))
    spliced.splice_prefix(2, Message.system("Summary: a question."))  # its assistant's call kept
    waiting = RedisHistory(client, "waiting", namespace="src")
    waiting.append_many(
        [
            *turns(1),
            Message.user("and?"),
            Message.assistant("", tool_calls=[ToolCall(id="w", name="f")]),
        ]
    )
    big = MAX_TOKENS - 15  # the total at its most
    limits = dump_lines(
        [envelope("system"), envelope("user", tokens=big), envelope("assistant", tokens=10)],
        [envelope("user", tokens=MAX_TOKENS), envelope("assistant", tokens=MAX_TOKENS)],
        baseline=MAX_TOKENS,
        mark=0,
        version=dumps.MAX_COUNT,
        ttl_ms=MAX_TTL_SECONDS * 1000,
        archive_dropped=dumps.MAX_COUNT,
        state=f"cooling:{MAX_STATE_VALUE}",
        compactions=dumps.MAX_COUNT,
        tokens_freed=dumps.MAX_COUNT,
    )
    return {
        "compacted": exported(rich(client, "rich", "src")).splitlines(),
        "spliced-inside-a-turn": exported(spliced).splitlines(),
        "waiting-for-a-tool": exported(waiting).splitlines(),
        "at-the-limits": limits,
        "summaries-calling-a-kept-tool": dump_lines(
            [
                envelope("system", "Summary", s=1),
                {**call("k1"), "s": 1},
                result("k1"),
                envelope("assistant"),
            ],
            baseline=30,
            mark=20,
        ),
        "summaries-then-a-user": dump_lines(
            [envelope("user", "Summary", s=1), envelope("user"), envelope("assistant")]
        ),
        "empty-with-a-baseline": dump_lines([], [envelope("user")], baseline=7, mark=0),
    }


ACCEPTED = (
    "compacted", "spliced-inside-a-turn", "waiting-for-a-tool", "at-the-limits",
    "summaries-calling-a-kept-tool", "summaries-then-a-user", "empty-with-a-baseline",
)  # fmt: skip


@pytest.mark.parametrize("name", ACCEPTED)
def test_after_an_accepted_import_every_later_call_works(
    real_redis: redis.Redis, name: str
) -> None:
    """Every dump the checks take, also at their limits (token counts, counters, TTL and
    cooldown at their most) and at the edges of the role rules the store's writes leave,
    imports, and then every call works on it: no total that Lua writes as a float, no
    estimate below zero, no state a later check refuses."""
    dumps_ = accepted_dumps(real_redis)
    assert set(dumps_) == set(ACCEPTED)
    dump, copy = import_conversation(Target(real_redis, "t"), dumps_[name], "copy")
    assert copy.token_estimate() == dump.token_estimate
    assert copy.entries() == dump.live
    every_later_call_works(copy)
    again, replaced = import_conversation(
        Target(real_redis, "t"), dumps_[name], "copy", replace=True
    )
    assert replaced.entries() == again.live
    assert int(real_redis.hget(replaced.keys.meta, "version") or 0) > dump.meta.version


def test_a_conversation_written_without_validation_imports_only_without_it(
    real_redis: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """A conversation whose writes skipped the role checks (``validate=False``) may break the
    rules: its dump is refused as any other, and imports with ``validate=False``
    (``--no-validate``), everything else still checked, reading back equal."""
    loose = RedisHistory(real_redis, "loose", namespace="t", validate=False)
    loose.append_many(
        [Message.user("hi"), Message.system("late"), Message.tool("?", tool_call_id="nope")]
    )
    data = exported(loose)
    with pytest.raises(DumpError, match="line 3: a system message may only come first"):
        import_conversation(Target(real_redis, "t"), data.splitlines(), "copy")
    assert not real_redis.exists(*RedisHistory(real_redis, "copy", namespace="t").keys.data)
    _, copy = import_conversation(
        Target(real_redis, "t"), data.splitlines(), "copy", validate=False
    )
    assert copy.entries() == loose.entries()
    assert meta_fields(real_redis, copy) == meta_fields(real_redis, loose)
    path = tmp_path / "loose.jsonl"
    path.write_bytes(data)
    where = ["--redis-url", redis_url, "--as", "cli"]
    assert main(["import", str(path), *where]) == 2
    assert main(["import", str(path), *where, "--no-validate"]) == 0
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(data.replace(b'"total":', b'"total":1', 1))
    assert (
        main(["import", str(broken), "--as", "other", "--redis-url", redis_url, "--no-validate"])
        == 2
    )


def test_restore_checks_a_dump_made_in_python(real_redis: redis.Redis) -> None:
    """``check_dump`` and ``restore`` refuse a ``Dump`` that ``load_dump`` would have refused,
    ``restore`` having written nothing: a total that disagrees, a message out of order, a
    token count over the limit, a state compaction never reaches."""
    dump = load_dump(dump_lines(SYSTEM_AND_TURN, baseline=40, mark=25))
    live = dump.live
    broken = {
        "total": dataclasses.replace(dump, meta=dataclasses.replace(dump.meta, total=24)),
        "order": dataclasses.replace(dump, live=[*live, live[0]]),
        "tokens": dataclasses.replace(
            dump, live=[*live[:-1], live[-1].model_copy(update={"tokens": 10**20})]
        ),
        "state": dataclasses.replace(
            dump, meta=dataclasses.replace(dump.meta, state=CompactionState("cooling", 0))
        ),
    }
    for name, wrong in broken.items():
        with pytest.raises(DumpError):
            check_dump(wrong)
        with pytest.raises(DumpError):
            restore(Target(real_redis, "t"), wrong)
        assert real_redis.dbsize() == 0, name
    assert restore(Target(real_redis, "t"), dump).entries() == live


def test_a_conversation_with_more_inline_data_than_one_write_imports(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import writes a conversation's inline data kept outside the list up to the
    conversation's limit (128 MiB), not one write's (20 MiB): three documents of 8 MiB,
    each appended alone, import and read back equal; past the conversation's limit the dump
    is refused naming the line of the entry that passes it, nothing written."""
    history = RedisHistory(real_redis, "docs", namespace="t")
    size = 8 << 20
    for n in range(3):
        pdf = b"%PDF-1.7\n" + bytes([n + 1]) * size
        history.append(Message.user([f"doc {n}", FilePart(data=pdf, media_type="application/pdf")]))
        history.append(Message.assistant("read"))
    data = exported(history)
    _, copy = import_conversation(Target(real_redis, "u"), data.splitlines())
    assert copy.snapshot() == history.snapshot()
    monkeypatch.setattr(dumps, "MAX_CONVERSATION_BLOB_BYTES", 2 * size + 100)
    before = keyspace(real_redis)
    with pytest.raises(DumpError, match="MAX_CONVERSATION_BLOB_BYTES") as refused:
        import_conversation(Target(real_redis, "v"), data.splitlines())
    assert refused.value.line == 2 + 4
    assert keyspace(real_redis) == before
    monkeypatch.undo()
    monkeypatch.setattr(dumps, "MAX_CONVERSATION_BLOBS", 2)  # and past its pieces' limit
    with pytest.raises(DumpError, match="MAX_CONVERSATION_BLOBS") as refused:
        import_conversation(Target(real_redis, "v"), data.splitlines())
    assert refused.value.line == 2 + 4
    assert keyspace(real_redis) == before
