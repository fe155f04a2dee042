"""Values a call takes are checked before anything is sent: a value that is not the type a
call documents (a float count, a bool, a string) or out of its range raises TypeError or
ValueError (LimitExceededError over a limit), writes nothing, and so can never be stored to
make a later call fail."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from test_bad_input import dump

from redis_history import (
    AsyncRedisHistory,
    CompactionPolicy,
    CompactionState,
    InvalidMessageError,
    LimitExceededError,
    Message,
    RedisHistory,
    ToolCall,
)

BAD: dict[str, tuple[type[Exception], Callable[[Any], Any]]] = {
    "set_ttl(1e14)": (LimitExceededError, lambda h: h.set_ttl(1e14)),
    "set_ttl(nan)": (ValueError, lambda h: h.set_ttl(float("nan"))),
    "set_ttl(-1)": (ValueError, lambda h: h.set_ttl(-1)),
    "set_ttl('60')": (TypeError, lambda h: h.set_ttl("60")),
    "set_ttl(True)": (TypeError, lambda h: h.set_ttl(True)),
    "set_ttl(3650 days + 1)": (LimitExceededError, lambda h: h.set_ttl(timedelta(days=3651))),
    "record_input_tokens(812.0)": (TypeError, lambda h: h.record_input_tokens(812.0)),
    "record_input_tokens('812')": (TypeError, lambda h: h.record_input_tokens("812")),
    "record_input_tokens(True)": (TypeError, lambda h: h.record_input_tokens(True)),
    "record_input_tokens(-1)": (ValueError, lambda h: h.record_input_tokens(-1)),
    "truncate(1.5)": (TypeError, lambda h: h.truncate(1.5)),
    "truncate(-1)": (ValueError, lambda h: h.truncate(-1)),
    "tail(1.5)": (TypeError, lambda h: h.tail(1.5)),
    "range(0.5)": (TypeError, lambda h: h.range(0.5)),
    "splice_prefix(1.0)": (TypeError, lambda h: h.splice_prefix(1.0, Message.system("s"))),
    "splice_prefix(archive_max_bytes=0.5)": (
        TypeError,
        lambda h: h.splice_prefix(1, Message.system("s"), archive_max_bytes=0.5),
    ),
    "append_many(a generator)": (
        TypeError,
        lambda h: h.append_many(m for m in [Message.assistant("a")]),
    ),
    "append_many(a message)": (TypeError, lambda h: h.append_many(Message.assistant("a"))),
    "replace(expected_ids='ab')": (
        TypeError,
        lambda h: h.replace([Message.user("u")], expected_ids="ab"),
    ),
    "rollback('an id')": (TypeError, lambda h: h.rollback("an id")),
    "compaction_event('bogus')": (ValueError, lambda h: h.compaction_event("bogus")),
    "compaction_event(value=1.5)": (TypeError, lambda h: h.compaction_event("compacted", 1.5)),
    "compaction_event(freed=-1)": (ValueError, lambda h: h.compaction_event("compacted", 1, -1)),
    "transcript_page(count=1.5)": (TypeError, lambda h: h.transcript_page(0, 1.5)),
    "op_id=''": (ValueError, lambda h: h.truncate(0, op_id="")),
    "op_id=5": (TypeError, lambda h: h.truncate(0, op_id=5)),
}


@pytest.mark.real_redis
@pytest.mark.parametrize(("error", "call"), BAD.values(), ids=BAD.keys())
def test_a_bad_value_is_refused_and_every_later_call_works(
    real_redis: redis.Redis, error: type[Exception], call: Callable[[RedisHistory], Any]
) -> None:
    """The value raises its typed error, nothing is written, and the reads and writes that a
    stored bad value used to break all work afterwards."""
    history = RedisHistory(real_redis, "c")
    history.append_many([Message.user("q"), Message.assistant("a")])
    history.record_input_tokens(40)
    before = dump(real_redis)
    with pytest.raises(error):
        call(history)
    assert dump(real_redis) == before
    assert history.token_estimate() == 40
    assert history.compaction_state() == CompactionState()
    assert history.maybe_compact(lambda request: None, CompactionPolicy()) is False
    history.append(Message.user("next"))
    assert history.ttl() is None
    history.truncate(2)
    assert [m.content for m in history.snapshot()] == ["q", "a"]


@pytest.mark.parametrize(
    ("error", "options"),
    [
        (LimitExceededError, {"ttl": 1e14}),
        (ValueError, {"ttl": 0}),
        (TypeError, {"max_message_bytes": 1.5}),
        (ValueError, {"wait_replicas": -1}),
        (TypeError, {"wait_replicas": 1.0}),
        (TypeError, {"validate": "yes"}),
    ],
)
def test_a_bad_option_is_refused_when_the_history_is_made(
    error: type[Exception], options: dict[str, Any]
) -> None:
    """Options are checked as the history is built, sync and asyncio alike."""
    with pytest.raises(error):
        RedisHistory(redis.Redis(), "c", **options)
    with pytest.raises(error):
        AsyncRedisHistory(redis.asyncio.Redis(), "c", **options)


@pytest.mark.real_redis
def test_an_empty_append_sends_nothing_and_creates_nothing(real_redis: redis.Redis) -> None:
    """append_many([]) is a no-op: no round trip, and no meta hash for a conversation that
    does not exist (which would make it exist)."""
    history = RedisHistory(real_redis, "c")
    real_redis.config_resetstat()
    history.append_many([])
    stats = real_redis.info("commandstats")
    assert all(name.startswith("cmdstat_config") for name in stats)
    assert not real_redis.exists(*history.keys.all)
    assert history.token_estimate() is None


def constructed(**fields: Any) -> Message:
    """A user message built without validation, ``fields`` over its defaults."""
    defaults = Message.user("")
    return Message.model_construct(**{**defaults.__dict__, "content": "hi", **fields})


UNREADABLE: dict[str, Callable[[], Message]] = {
    "an id of 300 characters": lambda: constructed(id="x" * 300),
    "an empty id": lambda: constructed(id=""),
    "a tool result without its call id": lambda: constructed(role="tool"),
    "arguments that are not an object": lambda: Message.assistant(
        "",
        tool_calls=[ToolCall.model_construct(id="c", name="f", arguments="x")],  # type: ignore[arg-type]
    ),
    "a call id of 300 characters": lambda: Message.assistant(
        "", tool_calls=[ToolCall.model_construct(id="c" * 300, name="f", arguments={})]
    ),
}


@pytest.mark.real_redis
@pytest.mark.parametrize("build", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_a_message_that_would_not_read_back_is_refused(
    real_redis: redis.Redis, build: Callable[[], Message]
) -> None:
    """A message built without validation (model_construct) that no read could parse is
    refused with InvalidMessageError when written, instead of breaking every later read."""
    history = RedisHistory(real_redis, "c")
    history.append(Message.user("q"))
    before = dump(real_redis)
    with pytest.raises(InvalidMessageError):
        history.append(build())
    assert dump(real_redis) == before
    assert [m.content for m in history.snapshot()] == ["q"]
