"""Generated adversarial values through every public method of the sync and asyncio histories
on a real Redis, beside the in-memory reference: after each call either every store raised the
same typed error and Redis is unchanged, or the stores agree; and the next well-formed turn is
always accepted (tried on a copy of the conversation). The same for the Redis long-term memory:
a typed error and nothing written, or every memory stored listed, recalled and exact."""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio
from backends import SyncOverAsync
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from redis_history import (
    AsyncRedisHistory,
    HistoryError,
    Message,
    RedisHistory,
    ToolCall,
    limits,
)
from redis_history.memory import MemoryFilters, RedisLongTermMemory
from redis_history.roles import RoleState
from redis_history.testing import InMemoryHistory

pytestmark = [pytest.mark.real_redis, pytest.mark.slow]

MAX_BYTES = 2048
"""A small max_message_bytes, so that sizes around it are cheap to generate."""

texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["", "\x00", "a\x00b", "\ud800", "😀" * 3, "字" * 40, "x" * 1900, "y" * 2100, '"},{"id":"']
    ),
)
ids = st.one_of(
    st.text(min_size=1, max_size=6),
    st.sampled_from(["m1", "a\x00b", "\ud800", "x" * 300, "", " ", '"', "\\"]),
)
counts = st.one_of(
    st.integers(-2, 12),
    st.sampled_from([10**13, 2**63, limits.MAX_REWRITE + 1, 1.5, math.nan, True, None, "3"]),
)
jsons: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


def _nested(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return {"deep": value}


deep: st.SearchStrategy[Any] = st.integers(1, 140).map(_nested)
ROLES = ["system", "user", "assistant", "tool"]
CALLS = ["a", "b", "c"]


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """A message as a caller might pass it: validated, or built without validation
    (``model_construct``) with whatever ids, texts, metadata and calls were drawn."""
    role = draw(st.sampled_from(ROLES))
    fields: dict[str, Any] = {"id": draw(ids), "role": role, "content": draw(texts)}
    if role == "assistant":
        calls = draw(st.lists(st.sampled_from([*CALLS, draw(ids)]), max_size=3))
        fields["tool_calls"] = tuple(
            ToolCall.model_construct(id=c, name="f", arguments=draw(jsons | deep))
            if draw(st.booleans())
            else ToolCall(id="ok" + str(i), name="f")
            for i, c in enumerate(calls)
        )
    if role == "tool":
        fields["tool_call_id"] = draw(st.sampled_from([*CALLS, "ok0", "ok1"]) | ids)
    if draw(st.booleans()):
        fields["metadata"] = draw(st.dictionaries(texts, jsons | deep, max_size=2))
    if draw(st.booleans()):
        try:
            return Message(**fields)
        except ValueError:
            pass
    defaults = Message(role="user")
    return Message.model_construct(
        **{"tool_calls": (), "tool_call_id": None, "name": None, "metadata": {}, **fields},
        created_at=defaults.created_at,
    )


batches = st.one_of(
    st.lists(messages(), max_size=4),
    st.just("huge"),
)


def continuation(state: RoleState) -> list[Message]:
    """A well-formed next turn from ``state``: the open calls' results, then a question and
    its answer (after a system prompt or an answer, or a reply to a result)."""
    out = [Message.tool("r", tool_call_id=call) for call in state.open]
    role = "tool" if out else state.role
    if role in ("user", "tool"):
        out.append(Message.assistant("reply"))
    return [*out, Message.user("next"), Message.assistant("answer")]


def build_machine(client: redis.Redis, url: str) -> type[RuleBasedStateMachine]:
    """Sync and asyncio histories on ``client``'s server, beside the reference."""

    class Adversary(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            client.flushall()
            self.runner = asyncio.Runner()
            self.aclient = redis.asyncio.Redis.from_url(url)
            options: dict[str, Any] = {"token_counter": "heuristic", "max_message_bytes": MAX_BYTES}
            self.sync = RedisHistory(client, "s", **options)
            self.async_ = SyncOverAsync(
                AsyncRedisHistory(self.aclient, "a", **options), self.runner
            )
            self.model = InMemoryHistory("m", **options)

        def teardown(self) -> None:
            self.runner.run(self.aclient.aclose())
            self.runner.close()

        def dump(self, history: Any) -> dict[str, Any]:
            return {key: client.dump(key) for key in history.keys.all}

        def all(self, operation: Callable[[Any], Any], *, model: bool = True) -> None:
            """Run ``operation`` on every store: the same outcome (a result, or an error of the
            same type) everywhere, and an error leaves Redis as it was."""
            outcomes = []
            for store in (self.sync, self.async_, *([self.model] if model else [])):
                before = self.dump(store) if store is not self.model else None
                try:
                    outcomes.append(("ok", _comparable(operation(store))))
                except (HistoryError, TypeError, ValueError) as exc:
                    outcomes.append(("error", type(exc)))
                    unchanged = before is None or self.dump(store) == before
                    assert unchanged, f"{type(exc).__name__}: {exc}"  # noqa: PT017
            assert all(o == outcomes[0] for o in outcomes), outcomes

        def batch(self, drawn: Any) -> list[Message]:
            if drawn == "huge":
                return [Message.user("u")] * (limits.MAX_BATCH_MESSAGES + 1)
            return list(drawn)

        @rule(message=messages())
        def append(self, message: Message) -> None:
            self.all(lambda h: h.append(message))

        @rule(drawn=batches)
        def append_many(self, drawn: Any) -> None:
            batch = self.batch(drawn)
            self.all(lambda h: h.append_many(batch))

        @rule(drawn=batches, fenced=st.booleans())
        def replace(self, drawn: Any, fenced: bool) -> None:
            batch = self.batch(drawn)
            expected = [m.id for m in self.model.snapshot()] if fenced else None
            self.all(lambda h: h.replace(batch, expected_ids=expected))

        @rule(
            drop=counts,
            summary=st.lists(messages(), min_size=1, max_size=3),
            fenced=st.booleans(),
            caps=st.tuples(counts | st.none(), counts | st.none()),
        )
        def splice_prefix(
            self, drop: Any, summary: list[Message], fenced: bool, caps: tuple[Any, Any]
        ) -> None:
            expected = None
            if fenced and isinstance(drop, int) and 0 <= drop < 100:
                expected = [m.id for m in self.model.snapshot()[:drop]]
            self.all(
                lambda h: h.splice_prefix(
                    drop,
                    summary,
                    expected_ids=expected,
                    archive_max_messages=caps[0],
                    archive_max_bytes=caps[1],
                )
            )

        @rule(n=counts, op=st.sampled_from([None, "t1", ""]))
        def truncate(self, n: Any, op: str | None) -> None:
            self.all(lambda h: h.truncate(n, op_id=op))

        @rule(
            picks=st.lists(st.integers(0, 8), min_size=0, max_size=3),
            extra=st.lists(ids, max_size=1),
            reopen=st.booleans(),
        )
        def rollback(self, picks: list[int], extra: list[str], reopen: bool) -> None:
            stored = [m.id for m in self.model.snapshot()]
            chosen = [stored[-1 - i] for i in picks if i < len(stored)] + extra
            self.all(lambda h: h.rollback(chosen, reopen_calls=reopen))

        @rule(n=counts)
        def record_input_tokens(self, n: Any) -> None:
            self.all(lambda h: h.record_input_tokens(n))

        @rule(
            event=st.sampled_from(["advance_turn", "compacted", "exhausted", "warned", "bogus"]),
            value=counts,
            freed=counts,
        )
        def compaction_event(self, event: Any, value: Any, freed: Any) -> None:
            self.all(lambda h: h.compaction_event(event, value, freed))

        @rule(
            ttl=st.one_of(
                st.none(),
                counts.map(_hours),
                st.sampled_from([1e14, math.inf, 3600.5, timedelta(days=4000), timedelta(0)]),
            )
        )
        def set_ttl(self, ttl: Any) -> None:
            """A TTL refused, removed, or long enough not to expire during the test (the
            reference does not expire)."""
            self.all(lambda h: h.set_ttl(ttl), model=False)

        @rule(n=counts, start=counts, stop=counts | st.none())
        def reads(self, n: Any, start: Any, stop: Any) -> None:
            self.all(lambda h: h.tail(n))
            self.all(lambda h: h.range(start, stop))
            self.all(lambda h: h.transcript_page(start, n))

        @invariant()
        def agree(self) -> None:
            for read in (
                lambda h: h.entries(),
                lambda h: h.snapshot_openai(),
                lambda h: h.token_estimate(),
                lambda h: h.compaction_status(),
                lambda h: h.compaction_stats(),
                lambda h: h.transcript(),
                lambda h: h.len(),
                lambda h: h.turns(),
            ):
                self.all(read)

        @invariant()
        def reads_as_turns(self) -> None:
            """No accepted call leaves a conversation that does not read as turns."""
            self.sync.turns()

        @invariant()
        def the_next_turn_is_accepted(self) -> None:
            """On a copy of the conversation, the well-formed next turn is appended."""
            turn = continuation(RoleState.of(self.model.snapshot()))
            probe = RedisHistory(client, "probe", token_counter="heuristic")
            client.delete(*probe.keys.all)
            for source, target in zip(self.sync.keys.all, probe.keys.all, strict=True):
                client.copy(source, target)
            probe.append_many(turn)
            model = copy.deepcopy(self.model)
            model.append_many(turn)
            assert probe.entries()[-len(turn) :] == model.entries()[-len(turn) :]

    return Adversary


def _hours(value: Any) -> Any:
    """A positive count as hours, anything else as it is."""
    return value * 3600 if type(value) is int and value > 0 else value


def _comparable(result: Any) -> Any:
    """A result as it compares across stores (a transcript page by its messages)."""
    return getattr(result, "messages", result)


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)


def test_adversarial_values_keep_every_promise(real_redis: redis.Redis, redis_url: str) -> None:
    """Every call refuses with a typed error having written nothing, or leaves a conversation
    the reference agrees with and that takes the next well-formed turn."""
    run_state_machine_as_test(build_machine(real_redis, redis_url), settings=SETTINGS)  # type: ignore[no-untyped-call, unused-ignore]


OWNERS = st.sampled_from(["agent"] * 6 + ["agent-2"] * 3 + ["", "a{b}", "a:b", "\ud800", 5, None])
USERS = st.sampled_from([None] * 3 + ["u1"] * 3 + ["u2"] * 2 + ["", "u\x00", 7])
TAGS: st.SearchStrategy[Any] = st.one_of(
    st.lists(st.sampled_from(["travel", "food"]), max_size=2),
    st.lists(st.sampled_from(["travel", "food", "", "t\ud800", 3]), max_size=3),
    st.sets(st.sampled_from(["travel", "food"])),
    st.sampled_from(["travel", None, ("travel",), (t for t in ["travel"])]),
)
EXTRA: st.SearchStrategy[Any] = st.just({}) | st.dictionaries(
    st.sampled_from(["n", "f", "l", "nested", "conversation_ids", "\ud800"]),
    st.one_of(
        jsons.filter(lambda v: not isinstance(v, float) or math.isfinite(v)),
        st.sampled_from([2**60, 12345678901234567, 0.1 + 0.2, [], {}, math.nan, (1, 2), b"x"]),
    ),
    max_size=3,
)
MEMORY_TEXTS = st.one_of(
    st.sampled_from(["Prefers an aisle seat", "prefers an AISLE seat ", "Flights to Lisbon"]),
    st.text(min_size=1, max_size=30),
    texts,
)


def build_memory_machine(client: redis.Redis) -> type[RuleBasedStateMachine]:
    """A RedisLongTermMemory on ``client``, driven with adversarial values."""

    class MemoryAdversary(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            client.flushall()
            self.memory = RedisLongTermMemory(client, namespace="adv")
            self.stored: dict[tuple[Any, Any, str], tuple[Any, dict[str, Any]]] = {}
            """Each memory a store returned, by owner (agent, user) and id (ids count per
            owner): its text and the extra metadata it was last given."""

        def dump(self) -> dict[Any, Any]:
            return {key: client.dump(key) for key in sorted(client.keys("*"))}

        def attempt(self, call: Callable[[], Any]) -> tuple[bool, Any]:
            """``call``'s result, or a typed error having changed nothing."""
            before = self.dump()
            try:
                return True, call()
            except (HistoryError, TypeError, ValueError) as exc:
                unchanged = self.dump() == before
                assert unchanged, f"{type(exc).__name__}: {exc}"  # noqa: PT017
                return False, exc

        @rule(
            text=MEMORY_TEXTS,
            agent=OWNERS,
            user=USERS,
            tags=TAGS,
            extra=EXTRA,
            many=st.booleans(),
        )
        def store(
            self, *, text: Any, agent: Any, user: Any, tags: Any, extra: dict[str, Any], many: bool
        ) -> None:
            metadata = {"agent_id": agent, "user_id": user, "tags": tags, **extra}
            if many:
                ok, result = self.attempt(lambda: self.memory.store_many([(text, metadata)]))
                result = result[0] if ok else result
            else:
                ok, result = self.attempt(lambda: self.memory.store(text, metadata))
            event("stored" if ok else f"refused: {type(result).__name__}")
            if ok:
                self.stored[agent, user, result] = (text, extra)

        @rule(
            query=MEMORY_TEXTS,
            agent=OWNERS,
            user=USERS,
            tags=TAGS,
            top_k=counts,
        )
        def recall(self, *, query: Any, agent: Any, user: Any, tags: Any, top_k: Any) -> None:
            self.attempt(
                lambda: self.memory.recall(query, MemoryFilters(agent, user, tags=tags), top_k)
            )

        @rule(agent=OWNERS, user=USERS, limit=counts, offset=counts)
        def list(self, agent: Any, user: Any, limit: Any, offset: Any) -> None:
            self.attempt(
                lambda: self.memory.list(MemoryFilters(agent, user), limit=limit, offset=offset)
            )

        @rule(data=st.data(), agent=OWNERS, user=USERS, own=st.booleans())
        def forget(self, data: st.DataObject, agent: Any, user: Any, own: bool) -> None:
            """Forget a stored memory by its owner's filters, or any id by any filters."""
            if own and self.stored:
                agent, user, memory_id = data.draw(st.sampled_from(sorted(self.stored, key=repr)))
            else:
                memory_id = data.draw(st.sampled_from(["1", "2", "missing", ""]))
            ok, removed = self.attempt(
                lambda: self.memory.forget(memory_id, MemoryFilters(agent, user))
            )
            if ok and removed:
                del self.stored[agent, user, memory_id]

        @invariant()
        def listed_is_recalled_and_exact(self) -> None:
            """Every memory stored is listed by its owner, recalled by its own text, and
            carries the extra metadata it was last stored with, equal as Python values."""
            for (agent, user, memory_id), (text, extra) in self.stored.items():
                owner = MemoryFilters(agent, user)
                listed = {r.memory_id: r for r in self.memory.list(owner, limit=100)}
                record = listed[memory_id]
                for key, value in extra.items():
                    assert _same(record.metadata[key], value), (key, record.metadata[key], value)
                found = self.memory.recall(text, owner, 100)
                assert memory_id in {r.memory_id for r in found}

    return MemoryAdversary


def _same(stored: Any, given: Any) -> bool:
    """Equal as JSON data: the same types and values all the way down."""
    if type(stored) is not type(given):
        return False
    if isinstance(given, dict):
        return stored.keys() == given.keys() and all(_same(stored[k], given[k]) for k in given)
    if isinstance(given, list):
        return len(stored) == len(given) and all(map(_same, stored, given))
    return bool(stored == given)


def test_adversarial_values_keep_every_promise_of_the_redis_memory(
    real_redis: redis.Redis,
) -> None:
    """Every memory call refuses with a typed error having written nothing, or leaves every
    stored memory listed, recalled by its text and holding its metadata exactly."""
    run_state_machine_as_test(build_memory_machine(real_redis), settings=SETTINGS)  # type: ignore[no-untyped-call, unused-ignore]
