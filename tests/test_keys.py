"""Key names: one module, one hash tag per conversation, validated names; the meta layout."""

from __future__ import annotations

import fakeredis
import pytest
import redis

from redis_history import Message, RedisHistory, ToolCall
from redis_history.store.keys import (
    ConversationKeys,
    MemoryKeys,
    conversation_of,
    conversation_pattern,
    namespace_pattern,
)


def test_keys_share_the_conversation_hash_tag() -> None:
    """Every key is rh:<namespace>:{<conversation>}:<kind>."""
    keys = ConversationKeys.build("conv-1", "tenant-a")
    assert keys.all == (
        "rh:tenant-a:{conv-1}:msgs",
        "rh:tenant-a:{conv-1}:meta",
        "rh:tenant-a:{conv-1}:archive",
        "rh:tenant-a:{conv-1}:lock",
        "rh:tenant-a:{conv-1}:stage",
        "rh:tenant-a:{conv-1}:summaries",
        "rh:tenant-a:{conv-1}:extraction",
        "rh:tenant-a:{conv-1}:xclaim",
    )
    assert keys.lock not in keys.data
    assert keys.summaries not in keys.data
    assert keys.stage not in keys.data


def test_conversation_ids_may_contain_colons() -> None:
    """A colon is fine inside the hash tag; the namespace may not have one."""
    assert ConversationKeys.build("user:42").msgs == "rh:default:{user:42}:msgs"
    with pytest.raises(ValueError, match="namespace"):
        ConversationKeys.build("c", "a:b")


@pytest.mark.parametrize("namespace", ["", "x{y", "new\nline", "n" * 201, "tenant a"])
def test_bad_namespaces_are_refused(namespace: str) -> None:
    """Empty, braced, control-character, overlong or spaced namespaces raise ValueError."""
    with pytest.raises(ValueError, match="namespace"):
        ConversationKeys.build("c", namespace)


def test_a_space_is_refused_in_a_namespace_and_a_prefix_not_in_an_id() -> None:
    """No ACL key pattern can hold a space, so neither a namespace nor a prefix may; a
    conversation id (inside the hash tag, never in a pattern) may."""
    assert ConversationKeys.build("a b").msgs == "rh:default:{a b}:msgs"
    for namespace, prefix, what in (("a b", "rh", "namespace"), ("a", "r h", "key prefix")):
        with pytest.raises(ValueError, match=f"{what} .* space"):
            ConversationKeys.build("c", namespace, prefix)
        with pytest.raises(ValueError, match=f"{what} .* space"):
            MemoryKeys.build("agent", None, namespace, prefix)
        with pytest.raises(ValueError, match=f"{what} .* space"):
            namespace_pattern(namespace, prefix)


def records(client: redis.Redis, meta: str) -> tuple[int, int]:
    """How many records of appends (8 bytes each in ``opa``) and of other writes (10 bytes
    each in ``ops``) the meta hash holds."""
    appends, writes = client.hmget(meta, "opa", "ops")
    return len(appends or b"") // 8, len(writes or b"") // 10


def fields(client: redis.Redis, meta: str) -> set[bytes]:
    """The meta hash's fields."""
    return {bytes(f) for f in client.hgetall(meta)}  # type: ignore[arg-type]


def test_meta_holds_the_documented_fields(client: redis.Redis) -> None:
    """An append writes only the total, the turn state and its op record; the baseline is a
    mark on the total; ``version`` counts rewrites, so appends leave it alone."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many([Message.user("one"), Message.assistant("two")])
    meta = history.keys.meta
    assert fields(client, meta) == {b"total", b"role", b"opa"}
    assert records(client, meta) == (1, 0)
    total = int(client.hget(meta, "total") or 0)

    history.record_input_tokens(500)
    assert client.hmget(meta, "baseline", "mark") == [b"500", str(total).encode()]
    history.append(Message.user("three"))
    history.append(Message.assistant("", tool_calls=[ToolCall(id="c1", name="f")]))
    assert client.hget(meta, "open") == b'["c1"]'
    grown = int(client.hget(meta, "total") or 0) - total
    assert history.token_estimate() == 500 + grown
    assert client.hget(meta, "version") is None

    history.truncate(3)
    assert client.hmget(meta, "version", "baseline", "mark", "open") == [b"1", None, None, b""]
    history.splice_prefix(1, Message.user("summary"))
    history.replace([Message.user("fresh")])
    assert client.hget(meta, "version") == b"3"
    assert fields(client, meta) == {
        b"total",
        b"role",
        b"open",
        b"version",
        b"opa",
        b"ops",
        b"abytes",
        b"adropped",
    }
    assert records(client, meta) == (2, 4)  # one per write, but the append truncate removed


@pytest.mark.parametrize(
    ("conversation", "namespace", "prefix", "what"),
    [
        ("conv-\ud800", "default", "rh", "conversation id"),
        ("c", "tenant-\udfff", "rh", "namespace"),
        ("c", "default", "\udc80rh", "key prefix"),
    ],
    ids=["conversation", "namespace", "prefix"],
)
def test_lone_surrogates_in_names_are_refused_up_front(
    conversation: str, namespace: str, prefix: str, what: str
) -> None:
    """A name UTF-8 cannot encode raises ValueError when the history is built, not on every call."""
    with pytest.raises(ValueError, match=f"{what} .* lone surrogate"):
        ConversationKeys.build(conversation, namespace, prefix)
    with pytest.raises(ValueError, match=f"{what} .* lone surrogate"):
        RedisHistory(fakeredis.FakeRedis(), conversation, namespace=namespace, prefix=prefix)


def test_the_scan_pattern_takes_the_namespace_literally() -> None:
    """A namespace or prefix holding glob characters matches only itself; the glob applies to
    the conversation id; conversation_of keeps only the data keys of the namespace."""
    assert conversation_pattern("t*", "rh", "a?") == r"rh:t\*:{a?}:*"
    assert conversation_pattern("[x]") == r"rh:\[x\]:{*}:*"
    with pytest.raises(ValueError, match="braces"):
        conversation_pattern("t", match="{a}")
    keys = ConversationKeys.build("a:b", "t")
    assert {conversation_of(key, "t") for key in keys.data} == {"a:b"}
    assert conversation_of(keys.lock, "t") is None
    assert all(conversation_of(key, "t") is None for key in keys.restoring("f00"))
    assert conversation_of(keys.msgs, "u") is None
    assert conversation_of("rh:t:mem:{agent}:stats", "t") is None


def test_a_namespace_pattern_refuses_what_would_widen_it() -> None:
    """An ACL key pattern is built only from names without glob characters."""
    assert namespace_pattern("tenant-a") == "rh:tenant-a:*"
    for namespace in ("a*", "a?", "a[b]", "a\\b"):
        with pytest.raises(ValueError, match="wildcard"):
            namespace_pattern(namespace)
