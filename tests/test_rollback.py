"""Fenced rewrites: rollback removes exactly the caller's messages; replace names what it expects.

Run against every backend (see ``backends.py``), like the contract suite; the lost reply of a
rollback on a real server, through the fault proxy.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from faults import FaultProxy
from samples import turns

from redis_history import Message, RedisHistory, RoleOrderError, StaleSnapshotError, ToolCall
from redis_history.wire.scripts import script, script_names


def state(history: Any) -> tuple[Any, ...]:
    return (history.entries(), history.token_estimate(), history.transcript(), history.len())


def failed_turn(n: int) -> list[Message]:
    """A user question and an assistant tool call whose result never came."""
    return [
        Message.user(f"failing question {n}"),
        Message.assistant("", tool_calls=[ToolCall(id=f"f{n}", name="slow")]),
    ]


def test_rollback_removes_exactly_the_named_messages(history: Any) -> None:
    """The caller's failed turn goes; everything before it stays, and a next turn is accepted."""
    history.append_many(turns(2))
    before = history.snapshot()
    mine = failed_turn(1)
    history.append_many(mine)
    assert history.rollback(mine) == 2
    assert history.snapshot() == before
    history.append(Message.user("try again"))


def test_rollback_finds_messages_wherever_compaction_moved_them(history: Any) -> None:
    """A compaction that shortened the list meanwhile does not make rollback cut in the wrong
    place (a positional truncate would leave half the failed turn and wedge the conversation)."""
    history.append_many(turns(3))
    noted = history.len()
    mine = failed_turn(1)
    history.append_many(mine)
    older = history.snapshot()[:9]
    assert history.splice_prefix(9, Message.system("summary"), expected_ids=[m.id for m in older])
    assert history.len() < noted  # truncate(noted) would now remove nothing of the failed turn
    expected = history.snapshot()[:-2]
    assert history.rollback([m.id for m in mine]) == 2
    assert history.snapshot() == expected
    history.append(Message.user("the next turn is accepted"))


def test_rollback_refuses_when_a_message_is_gone(history: Any) -> None:
    """If one of the messages is gone (compacted, or never stored), nothing is removed."""
    history.append_many(turns(1))
    mine = failed_turn(1)
    history.append_many(mine)
    before = state(history)
    with pytest.raises(StaleSnapshotError, match="never-stored"):
        history.rollback([mine[0].id, mine[1].id, "never-stored"])
    assert state(history) == before


def test_rollback_refuses_to_break_what_remains(history: Any) -> None:
    """Removing a tool call but not its result would leave an orphan result: refused."""
    history.append_many(turns(2))
    call, result = history.snapshot()[-3:-1]
    before = state(history)
    with pytest.raises(StaleSnapshotError, match="out of order"):
        history.rollback([call.id])
    assert state(history) == before
    with pytest.raises(StaleSnapshotError, match="out of order"):
        history.rollback([history.snapshot()[-4].id])  # a user message between two turns
    assert state(history) == before
    assert history.rollback([call, result, history.snapshot()[-1]]) == 3
    with pytest.raises(RoleOrderError):
        history.append(Message.user("the question is still unanswered"))  # role order holds
    history.append(Message.assistant("a fresh answer"))


def test_rollback_keeps_messages_other_pods_appended_after(history: Any) -> None:
    """A turn appended after the rolled-back one stays, in order, when the rules allow it."""
    history.append_many(turns(1))
    base = history.snapshot()
    mine = [Message.user("mine"), Message.assistant("a reply the pod discarded")]
    history.append_many(mine)
    theirs = [Message.user("another pod's question"), Message.assistant("its answer")]
    history.append_many(theirs)
    assert history.rollback(mine) == 2
    assert history.snapshot() == base + theirs


def test_rollback_resets_the_baseline_and_counts_tokens(history: Any) -> None:
    """The token total loses exactly the removed messages; the baseline is dropped."""
    history.append_many(turns(1))
    total = history.token_estimate()
    mine = failed_turn(2)
    history.append_many(mine)
    history.record_input_tokens(10_000)
    history.rollback(mine)
    assert history.token_estimate() == total


def test_a_rollback_of_messages_already_removed_is_stale(history: Any) -> None:
    """Each rollback is its own operation: rolling back messages a rollback already removed
    raises StaleSnapshotError and changes nothing, so a count always means "removed by this
    call"; repeated with the first call's op_id, it answers as the first did."""
    history.append_many(turns(1))
    mine = failed_turn(3)
    history.append_many(mine)
    assert history.rollback(mine) == 2
    after = state(history)
    with pytest.raises(StaleSnapshotError, match="no longer in the conversation"):
        history.rollback(mine)
    assert state(history) == after
    again = failed_turn(4)
    history.append_many(again)
    assert history.rollback(again, op_id="rollback-1") == 2
    assert history.rollback(again, op_id="rollback-1") == 2
    assert state(history) == after
    with pytest.raises(StaleSnapshotError, match="no longer in the conversation"):
        history.rollback(again, op_id="rollback-2")


@pytest.mark.real_redis
def test_a_rollback_whose_reply_is_lost_is_applied_once_and_counted(
    fault_proxy: FaultProxy, real_redis: redis.Redis
) -> None:
    """redis-py re-sends a rollback whose reply was lost after the server applied it: the
    re-send carries the first one's token, so it is answered with the count, not refused as
    stale, and removed nothing more; a new rollback of the same messages is stale."""
    for name in script_names():
        real_redis.script_load(script(name).source)
    client = redis.Redis(host=fault_proxy.host, port=fault_proxy.port)  # retries by default
    history = RedisHistory(client, "c")
    history.append_many(turns(2))
    before = history.snapshot()
    mine = failed_turn(1)
    history.append_many(mine)
    fault_proxy.drop_reply(b"EVALSHA")
    assert history.rollback(mine) == 2
    assert fault_proxy.dropped == 1, "the fault did not fire"
    assert RedisHistory(real_redis, "c").snapshot() == before
    with pytest.raises(StaleSnapshotError):
        history.rollback(mine)
    client.close()


def test_rollback_needs_ids(history: Any) -> None:
    """An empty list or an empty id is a ValueError."""
    with pytest.raises(ValueError, match="message ids"):
        history.rollback([])
    with pytest.raises(ValueError, match="message id must be a non-empty string"):
        history.rollback([""])


def test_replace_refuses_when_the_conversation_moved(history: Any) -> None:
    """A replace naming the snapshot it edited refuses if an append landed meanwhile."""
    history.append_many(turns(1))
    snapshot = history.snapshot()
    history.append(Message.user("appended by another pod"))
    before = state(history)
    with pytest.raises(StaleSnapshotError):
        history.replace(snapshot[:1], expected_ids=[m.id for m in snapshot])
    assert state(history) == before
    current = [m.id for m in history.snapshot()]
    history.replace(snapshot[:1], expected_ids=current)
    assert history.snapshot() == snapshot[:1]


def test_replace_fence_sees_reordered_or_swapped_ids(history: Any) -> None:
    """The expected ids must be the list, in order: a different prefix refuses."""
    history.append_many(turns(1))
    ids = [m.id for m in history.snapshot()]
    with pytest.raises(StaleSnapshotError):
        history.replace([Message.user("x")], expected_ids=list(reversed(ids)))
    with pytest.raises(StaleSnapshotError):
        history.replace([Message.user("x")], expected_ids=ids[:-1])
    history.replace([Message.user("x")], expected_ids=ids)
