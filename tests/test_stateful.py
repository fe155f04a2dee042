"""Random operation sequences: the Lua scripts agree with the in-memory reference at every step,
by either role rules, and with pods of both rules writing one conversation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from redis_history import HistoryError, Message, RedisHistory, ToolCall
from redis_history.roles import ROLES, Roles
from redis_history.testing import InMemoryHistory

CALL_IDS = ["a", "b", "c"]

specs = st.tuples(
    st.sampled_from(["system", "user", "assistant", "tool"]),
    st.sets(st.sampled_from(CALL_IDS), max_size=2),
    st.sampled_from(CALL_IDS),
    st.text(max_size=12),
)


def build_machine(
    client: Any, rules: tuple[Roles, ...] = ("strict",)
) -> type[RuleBasedStateMachine]:
    """A state machine class comparing a RedisHistory on ``client`` with the reference; with
    several ``rules``, the writer switches between pods of each."""

    class HistoryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            client.flushall()
            self.pods = {
                roles: RedisHistory(client, "conv", token_counter="heuristic", roles=roles)
                for roles in rules
            }
            self.redis = self.pods[rules[0]]
            self.model = InMemoryHistory("conv", token_counter="heuristic", roles=rules[0])
            self.serial = 0
            self.batches: list[list[Message]] = []

        def message(self, spec: tuple[str, set[str], str, str]) -> Message:
            role, calls, answer, content = spec
            self.serial += 1
            fields: dict[str, Any] = {"id": f"m{self.serial}", "role": role, "content": content}
            if role == "assistant":
                fields["tool_calls"] = [ToolCall(id=c, name="f") for c in sorted(calls)]
            if role == "tool":
                fields["tool_call_id"] = answer
            return Message(**fields)

        def both(self, operation: Callable[[Any], Any]) -> None:
            outcomes = []
            for store in (self.redis, self.model):
                try:
                    outcomes.append(("ok", operation(store)))
                except (HistoryError, ValueError) as exc:
                    outcomes.append(("error", type(exc)))
            assert outcomes[0] == outcomes[1]

        @rule(spec=specs)
        def append(self, spec: tuple[str, set[str], str, str]) -> None:
            message = self.message(spec)
            self.batches.append([message])
            self.both(lambda h: h.append(message))

        @rule(batch=st.lists(specs, max_size=4))
        def append_many(self, batch: list[tuple[str, set[str], str, str]]) -> None:
            messages = [self.message(spec) for spec in batch]
            self.batches.append(messages)
            self.both(lambda h: h.append_many(messages))

        @rule(batch=st.lists(specs, max_size=4))
        def replace(self, batch: list[tuple[str, set[str], str, str]]) -> None:
            messages = [self.message(spec) for spec in batch]
            self.both(lambda h: h.replace(messages))

        @rule(n=st.integers(0, 8), fenced=st.booleans(), spoil=st.booleans())
        def splice_prefix(self, n: int, fenced: bool, spoil: bool) -> None:
            summary = self.message(("user", set(), "a", "summary"))
            ids = None
            if fenced:
                ids = [m.id for m in self.model.snapshot()[:n]]
                ids += ["missing"] * (n - len(ids))
                if spoil and ids:
                    ids[0] = "spoiled"
            self.both(lambda h: h.splice_prefix(n, summary, expected_ids=ids))

        @rule(n=st.integers(0, 10), op=st.sampled_from([None, "t1", "t2"]))
        def truncate(self, n: int, op: str | None) -> None:
            self.both(lambda h: h.truncate(n, op_id=op))

        @rule(picks=st.sets(st.integers(0, 12), min_size=1, max_size=4), gone=st.booleans())
        def rollback(self, picks: set[int], gone: bool) -> None:
            ids = [m.id for m in self.model.snapshot()]
            chosen = [ids[-1 - i] for i in sorted(picks) if i < len(ids)] or ["missing"]
            if gone:
                chosen.append("never-stored")
            self.both(lambda h: h.rollback(chosen))

        @rule(batch=st.lists(specs, max_size=3), spoil=st.booleans())
        def fenced_replace(self, batch: list[tuple[str, set[str], str, str]], spoil: bool) -> None:
            messages = [self.message(spec) for spec in batch]
            ids = [m.id for m in self.model.snapshot()]
            if spoil:
                ids = ids[1:] if ids else ["missing"]
            self.both(lambda h: h.replace(messages, expected_ids=ids))

        @rule(data=st.data())
        def repeat_an_append(self, data: st.DataObject) -> None:
            """A message already stored, appended again: a no-op on both, or refused on both."""
            stored = self.model.snapshot()
            if stored:
                message = data.draw(st.sampled_from(stored))
                self.both(lambda h: h.append(message))

        @rule(data=st.data())
        def append_a_batch_again(self, data: st.DataObject) -> None:
            """One of the batches appended so far, appended again (after whatever rewrites
            came since): a replay, appended again, or refused, alike on both."""
            if self.batches:
                messages = data.draw(st.sampled_from(self.batches[-8:]))
                self.both(lambda h: h.append_many(messages))

        @rule(roles=st.sampled_from(rules))
        def switch_pods(self, roles: Roles) -> None:
            """The next writes come from a pod with these role rules."""
            self.redis, self.model.roles = self.pods[roles], roles

        @rule(n=st.integers(0, 10_000))
        def record_input_tokens(self, n: int) -> None:
            self.both(lambda h: h.record_input_tokens(n))

        @invariant()
        def agree(self) -> None:
            assert self.redis.entries() == self.model.entries()
            assert self.redis.token_estimate() == self.model.token_estimate()
            assert self.redis.transcript() == self.model.transcript()
            turns: list[object] = []
            for store in (self.redis, self.model):
                try:
                    turns.append(store.turns())
                except HistoryError as exc:
                    turns.append((type(exc), exc.index))
            assert turns[0] == turns[1]

    return HistoryMachine


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_scripts_agree_with_the_reference_on_fakeredis() -> None:
    """fakeredis running the Lua (via lupa) matches InMemoryHistory step by step."""
    run_state_machine_as_test(build_machine(fakeredis.FakeRedis()), settings=SETTINGS)  # type: ignore[no-untyped-call, unused-ignore]


@pytest.mark.real_redis
def test_scripts_agree_with_the_reference_on_real_redis(real_redis: redis.Redis) -> None:
    """A real redis-server running the Lua matches InMemoryHistory step by step."""
    run_state_machine_as_test(build_machine(real_redis), settings=SETTINGS)  # type: ignore[no-untyped-call, unused-ignore]


def test_pods_of_both_role_rules_agree_with_the_reference_on_fakeredis() -> None:
    """Strict and lenient pods taking turns on one conversation: each write is checked by its
    pod's rules against what the other left, as the reference checks it."""
    machine = build_machine(fakeredis.FakeRedis(), ROLES)
    run_state_machine_as_test(machine, settings=SETTINGS)  # type: ignore[no-untyped-call, unused-ignore]


@pytest.mark.real_redis
def test_pods_of_both_role_rules_agree_with_the_reference_on_real_redis(
    real_redis: redis.Redis,
) -> None:
    """The same on a real redis-server."""
    run_state_machine_as_test(build_machine(real_redis, ROLES), settings=SETTINGS)  # type: ignore[no-untyped-call, unused-ignore]
