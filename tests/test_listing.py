"""``redis-history ls`` and ``stats``: a namespace's conversations found by SCAN on every
primary (a real Redis and a three-primary cluster), each with its length, token estimate,
compaction state, TTL and archive; one conversation's accounting; their exit statuses."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis
from commands import cli
from redis.cluster import RedisCluster
from samples import turns

from redis_history import CompactionPolicy, ExtractiveSummarizer, Message, RedisHistory
from redis_history.admin import Target, conversation_ids, conversation_stats, list_conversations
from redis_history.cli import main
from redis_history.compaction.run import run_compaction
from redis_history.demo.server import LocalCluster

pytestmark = pytest.mark.real_redis

POLICY = CompactionPolicy(soft_tokens=50, keep_last_turns=1, min_messages=2)
"""Compacts the sample turns down to their last one."""


def seed(client: Any, namespace: str, ids: list[str]) -> None:
    """A short conversation under each id."""
    for conversation in ids:
        RedisHistory(client, conversation, namespace=namespace).append_many(
            [Message.user(f"hello {conversation}"), Message.assistant("hi")]
        )


def compacted(client: Any, conversation: str, namespace: str = "t") -> RedisHistory:
    """A conversation of six tool-using turns, compacted once, with a TTL."""
    history = RedisHistory(client, conversation, namespace=namespace, ttl=600)
    history.append_many(turns(6))
    assert run_compaction(history, ExtractiveSummarizer(), POLICY).status == "compacted"
    history.record_input_tokens(321)
    return history


def test_ls_lists_each_conversation_of_the_namespace_once(real_redis: redis.Redis) -> None:
    """Only the namespace's conversations, each once (its three keys found), sorted; the
    long-term memories and other namespaces' keys are not conversations."""
    seed(real_redis, "t", ["b", "a:1", "c*"])
    seed(real_redis, "t2", ["x"])
    seed(real_redis, "t*", ["y"])  # a namespace whose name is a glob of "t"'s
    real_redis.set("rh:t:mem:{agent}:stats", "not a conversation")
    target = Target(real_redis, "t")
    assert conversation_ids(target) == ["a:1", "b", "c*"]
    assert conversation_ids(Target(real_redis, "t*")) == ["y"]
    assert conversation_ids(target, match="c\\*") == ["c*"]
    assert conversation_ids(target, match="a:*") == ["a:1"]
    assert len(conversation_ids(target, limit=2)) == 2


def test_ls_reports_length_tokens_state_ttl_and_archive(real_redis: redis.Redis) -> None:
    """Each row reads what the store's own calls read."""
    history = compacted(real_redis, "big")
    seed(real_redis, "t", ["small"])
    infos = {info.conversation_id: info for info in list_conversations(Target(real_redis, "t"))}
    big = infos["big"]
    assert big.messages == len(history)
    assert big.tokens == history.token_estimate()
    assert big.state == str(history.compaction_state()) == "CompactedThisTurn{cooldown: 2}"
    assert big.ttl == 600
    assert big.archived == real_redis.llen(history.keys.archive) > 0
    assert infos["small"].to_json() == {
        "conversation_id": "small",
        "namespace": "t",
        "messages": 2,
        "tokens": RedisHistory(real_redis, "small", namespace="t").token_estimate(),
        "state": "Ready",
        "ttl": None,
        "archived": 0,
    }


def test_ls_lists_an_unreadable_conversation_with_its_error(
    real_redis: redis.Redis, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    """A conversation whose meta hash was lost (evicted) is listed as unreadable, saying why,
    and ls exits 1; the others are listed as usual."""
    seed(real_redis, "t", ["fine", "lost"])
    real_redis.delete(RedisHistory(real_redis, "lost", namespace="t").keys.meta)
    assert main(["ls", "--redis-url", redis_url, "--namespace", "t", "--json"]) == 1
    rows = {row["conversation_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["fine"]["state"] == "Ready"
    assert rows["lost"]["state"] == "unreadable"
    assert "meta hash is gone" in rows["lost"]["error"]


def test_ls_scans_every_primary_of_a_cluster(
    cluster_client: RedisCluster, redis_cluster: LocalCluster
) -> None:
    """On a cluster the conversations spread over the primaries and ls finds all of them, with
    the same fields, through the command line's --cluster too."""
    ids = [f"conv-{i}" for i in range(40)]
    seed(cluster_client, "t", ids)
    compacted(cluster_client, "conv-big")
    holders = [node for node in Target(cluster_client).primaries() if node.dbsize()]
    assert len(holders) == 3, "every primary holds some"
    target = Target(cluster_client, "t")
    infos = list_conversations(target)
    assert [info.conversation_id for info in infos] == sorted([*ids, "conv-big"])
    big = next(info for info in infos if info.conversation_id == "conv-big")
    assert big.state == "CompactedThisTurn{cooldown: 2}"
    assert big.archived > 0
    result = cli("ls", "--redis-url", redis_cluster.url, "--cluster", "--namespace", "t", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 41
    assert result.stderr.startswith("redis-history: the Redis Cluster at redis://127.0.0.1:")


def test_stats_adds_the_accounting_and_the_last_compaction(real_redis: redis.Redis) -> None:
    """stats: the row of ls plus the baseline, the archive's bytes, the counters, the summary
    the last compaction wrote, and how long until the conversation expires."""
    history = compacted(real_redis, "c")
    stats = conversation_stats(Target(real_redis, "t"), "c")
    counters = history.compaction_stats()
    summary = history.snapshot()[0]
    assert stats.messages == len(history)
    assert stats.tokens == history.token_estimate()
    assert stats.baseline == 321
    assert stats.compactions == counters.compactions == 1
    assert stats.tokens_freed == counters.tokens_freed > 0
    assert stats.archive_bytes == int(real_redis.hget(history.keys.meta, "abytes") or 0) > 0
    assert stats.last_compaction == {
        "at": summary.created_at.isoformat(timespec="milliseconds"),
        "message_id": summary.id,
        "covers": len(summary.metadata["covers"]),
        "tokens_replaced": summary.metadata["tokens_replaced"],
    }
    assert stats.compaction_pending is False
    assert stats.compacting is False
    assert stats.expires_in is not None
    assert 0 < stats.expires_in <= 600


def test_stats_of_an_unknown_conversation_exits_3(
    redis_url: str, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not found is exit 3, saying so, for stats as for the other commands."""
    assert main(["stats", "nobody", "--redis-url", redis_url]) == 3
    assert "no such conversation" in capsys.readouterr().err


def test_stats_prints_a_table_or_json(
    redis_url: str, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --json, one line per field; with it, one object holding every field of ls."""
    compacted(real_redis, "c")
    assert main(["stats", "c", "--namespace", "t", "--redis-url", redis_url]) == 0
    out = capsys.readouterr()
    assert "tokens freed" in out.out
    assert "state               CompactedThisTurn{cooldown: 2}" in out.out
    assert out.err == f"redis-history: Redis at {redis_url}, namespace t\n"
    assert main(["stats", "c", "--namespace", "t", "--redis-url", redis_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ls_fields = {"conversation_id", "namespace", "messages", "tokens", "state", "ttl", "archived"}
    assert ls_fields <= set(data)
    assert data["compactions"] == 1


SHOWN = {
    "plain": "plain",
    "bidi\u202egnp.exe": "bidi\\u202egnp.exe",  # a right-to-left override
    "c1\x85next": "c1\\x85next",  # a C1 control
    "zero\u200bwidth": "zero\\u200bwidth",
    "back\\slash": "back\\\\slash",
    "café 字 😀": "café 字 😀",  # printable: as it is
}
"""Ids a conversation may have, and how ls and stats print them."""


def printable(text: str) -> bool:
    """Whether every line of ``text`` is made of printable characters only."""
    return all(line.isprintable() for line in text.splitlines())


def test_ls_prints_ids_escaped_and_lists_past_keys_no_conversation_has(
    real_redis: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ids holding characters a terminal would act on (a bidi override, a C1 control, a
    zero-width space) are printed escaped, backslashes doubled, printable ones as they are;
    JSON escapes them too and reads back the exact ids. Keys another program wrote, whose
    id no conversation can have (an ESC sequence, bytes that are not UTF-8), do not fail the
    listing: the conversations are listed and so is each such key, escaped, as unreadable
    with its error, and ls exits 1."""
    seed(real_redis, "t", list(SHOWN))
    real_redis.rpush("rh:t:{red\x1b[31mtext}:msgs", b"x")
    real_redis.hset(b"rh:t:{bytes\xff}:meta", "total", 1)
    target = Target(real_redis, "t")
    assert conversation_ids(target) == sorted(SHOWN)
    infos = {info.conversation_id: info for info in list_conversations(target)}
    foreign = {"red\x1b[31mtext", "bytes\udcff"}
    assert set(infos) == set(SHOWN) | foreign
    for key in foreign:
        assert infos[key].state == "unreadable"
        assert "not a conversation's key" in (infos[key].error or "")
    assert all(infos[key].error is None and infos[key].messages == 2 for key in SHOWN)

    assert main(["ls", "--namespace", "t", "--redis-url", redis_url]) == 1
    out = capsys.readouterr().out
    assert printable(out)
    ids = [line.split("  ")[0].rstrip() for line in out.splitlines()[1:]]
    assert sorted(ids) == sorted([*SHOWN.values(), "red\\x1b[31mtext", "bytes\\udcff"])
    assert "not a conversation's key: conversation id 'red\\x1b[31mtext' may not" in out

    assert main(["ls", "--namespace", "t", "--redis-url", redis_url, "--json"]) == 1
    text = capsys.readouterr().out
    assert printable(text)
    assert "\\u202e" in text
    assert {row["conversation_id"] for row in json.loads(text)} == set(SHOWN) | foreign

    for conversation, shown in SHOWN.items():
        assert main(["stats", conversation, "--namespace", "t", "--redis-url", redis_url]) == 0
        out = capsys.readouterr().out
        assert printable(out)
        assert re.search(rf"^conversation id +{re.escape(shown)}$", out, re.MULTILINE)
