"""Compactors: the protocol and its resolution, the tool-output elider on crafted histories,
and what the worker does with any compactor's result (checked, then the fenced write-back)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import fakeredis
import pytest
from compactors_for_tests import KeepLastTurn, Unpaired
from samples import turns

from redis_history import (
    CompactionContext,
    CompactionPolicy,
    Compactor,
    CompactorError,
    CompactorRequest,
    Message,
    RedisHistory,
    SummarizingCompactor,
    ToolCall,
    ToolOutputElider,
    Turn,
    group_turns,
    resolve_compactor,
    run_compaction,
)
from redis_history.cli import main
from redis_history.compaction.compactors import ALIASES, elided_stub
from redis_history.compaction_state import CompactionState
from redis_history.settings import COMPACTOR, WorkerSettings
from redis_history.testing import FakeSummarizer
from redis_history.tokens import resolve_counter
from redis_history.turns import group_entries

POLICY = CompactionPolicy(soft_tokens=50, hard_tokens=100_000, keep_last_turns=1, min_messages=2)
BIG = "x" * 5000
"""Tool output above the elider's default threshold (4096 bytes)."""


def request(messages: Sequence[Message], policy: CompactionPolicy = POLICY) -> CompactorRequest:
    """What the worker would hand a compactor for ``messages`` (all of them compactable)."""
    counter = resolve_counter("heuristic")
    return CompactorRequest(
        context=CompactionContext("tenant", "conv", policy),
        turns=tuple(group_turns(messages)),
        tokens=tuple(counter.count(m.content) for m in messages),
        token_counter=counter,
        summarizer=FakeSummarizer(),
    )


def tool_turn(i: int, outputs: Sequence[str], names: Sequence[str] = ()) -> list[Message]:
    """A question, one step of parallel calls answered by ``outputs``, and the answer."""
    names = list(names) or [f"tool{j}" for j in range(len(outputs))]
    calls = [ToolCall(id=f"c{i}.{j}", name=names[j]) for j in range(len(outputs))]
    return [
        Message.user(f"q{i}", id=f"u{i}"),
        Message.assistant("", tool_calls=calls, id=f"a{i}"),
        *(
            Message.tool(out, tool_call_id=f"c{i}.{j}", id=f"t{i}.{j}")
            for j, out in enumerate(outputs)
        ),
        Message.assistant(f"answer {i}", id=f"r{i}"),
    ]


# -- resolution and conformance -----------------------------------------------------------------


def test_the_built_ins_are_compactors_and_resolve_by_alias() -> None:
    """Both built-ins satisfy the protocol; None means summarize; aliases make new instances."""
    assert isinstance(SummarizingCompactor(), Compactor)
    assert isinstance(ToolOutputElider(), Compactor)
    assert isinstance(resolve_compactor(None), SummarizingCompactor)
    assert isinstance(resolve_compactor("summarize"), SummarizingCompactor)
    assert isinstance(resolve_compactor("elide-tool-output"), ToolOutputElider)
    assert set(ALIASES) == {"summarize", "elide-tool-output"}
    elider = ToolOutputElider(100)
    assert resolve_compactor(elider) is elider


def test_a_compactor_resolves_from_a_dotted_path_or_a_class() -> None:
    """A path to a class (either separator) or the class itself gives an instance."""
    assert isinstance(resolve_compactor("compactors_for_tests:KeepLastTurn"), KeepLastTurn)
    assert isinstance(resolve_compactor("compactors_for_tests.KeepLastTurn"), KeepLastTurn)
    assert isinstance(resolve_compactor(KeepLastTurn), KeepLastTurn)


def test_what_is_not_a_compactor_is_refused_with_the_reason() -> None:
    """Unknown names are ValueErrors, objects without compact are TypeErrors."""
    with pytest.raises(ValueError, match="unknown compactor 'squash'"):
        resolve_compactor("squash")
    with pytest.raises(ValueError, match="unknown compactor"):
        resolve_compactor("compactors_for_tests:Nope")
    with pytest.raises(TypeError, match="cannot be called without arguments"):
        resolve_compactor("samples:turns")
    with pytest.raises(TypeError, match="is not a Compactor"):
        resolve_compactor("samples:BIG_OUTPUT")
    with pytest.raises(TypeError, match="not a Compactor"):
        resolve_compactor(FakeSummarizer())  # type: ignore[arg-type]


def test_the_compactor_setting_is_read_from_the_environment() -> None:
    """REDIS_HISTORY_COMPACTOR names the workers' compactor; unset or empty: summarize."""
    assert WorkerSettings.from_env({}).compactor == "summarize" == COMPACTOR.default
    assert WorkerSettings.from_env({COMPACTOR.name: ""}).compactor == "summarize"
    env = {COMPACTOR.name: "elide-tool-output"}
    assert WorkerSettings.from_env(env).compactor == "elide-tool-output"


def test_the_elider_threshold_is_checked() -> None:
    """A threshold that is not a positive int is refused."""
    with pytest.raises(TypeError):
        ToolOutputElider("10")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ToolOutputElider(True)
    with pytest.raises(ValueError, match="at least 1"):
        ToolOutputElider(0)


# -- the elider on crafted histories ------------------------------------------------------------


def test_the_elider_stubs_bulky_results_and_keeps_every_pair() -> None:
    """A bulky result becomes a stub naming the tool and the bytes removed, with the same id
    and tool_call_id; every other message is kept as it was, and the pairs still group."""
    messages = [Message.system("prompt"), *tool_turn(0, [BIG], ["search"]), *tool_turn(1, ["ok"])]
    out = ToolOutputElider().compact(request(messages))
    assert out is not None
    assert [m.id for m in out] == [m.id for m in messages]
    stub = out[3]
    assert (
        stub.content == "[tool output elided: search, 5,000 bytes]" == elided_stub("search", 5000)
    )
    assert (stub.role, stub.tool_call_id, stub.created_at) == (
        "tool",
        "c0.0",
        messages[3].created_at,
    )
    assert stub.metadata["elided"] == {"tool": "search", "bytes": 5000}
    assert [m for i, m in enumerate(out) if i != 3] == [m for i, m in enumerate(messages) if i != 3]
    (first, second) = group_turns(out)
    assert [p.result.id for p in first.tool_pairs] == ["t0.0"]
    assert second.tool_pairs[0].result.content == "ok"


def test_the_elider_handles_a_pair_right_at_the_cut() -> None:
    """The prefix's last step is a bulky pair, answered by a reply that ends the turn just
    before the cut: stubbed, still matched, and the tail's user message still fits."""
    messages = [
        Message.user("q", id="u"),
        Message.assistant("", tool_calls=[ToolCall(id="c", name="fetch")], id="a"),
        Message.tool(BIG, tool_call_id="c", id="t"),
        Message.assistant("done", id="r"),
    ]
    out = ToolOutputElider().compact(request(messages))
    assert out is not None
    assert out[2].content == elided_stub("fetch", 5000)
    (turn, _) = group_turns([*out, Message.user("next")])
    assert turn.complete
    assert turn.tool_pairs[0].call.id == turn.tool_pairs[0].result.tool_call_id == "c"


def test_the_elider_stubs_only_the_bulky_ones_among_parallel_calls() -> None:
    """Parallel calls in one step: each result is judged alone, and named by its own call."""
    messages = tool_turn(0, ["small", BIG, "é" * 3000], ["a", "b", "c"])
    out = ToolOutputElider().compact(request(messages))
    assert out is not None
    assert [m.content for m in out[2:5]] == [
        "small",
        elided_stub("b", 5000),
        elided_stub("c", 6000),  # bytes, not characters
    ]
    (turn,) = group_turns(out)
    assert [p.call.name for p in turn.tool_pairs] == ["a", "b", "c"]


def test_the_threshold_is_inclusive_and_configurable() -> None:
    """Output exactly min_bytes long is elided; shorter is not."""
    messages = tool_turn(0, ["y" * 100, "y" * 99])
    out = ToolOutputElider(min_bytes=100).compact(request(messages))
    assert out is not None
    assert [m.content for m in out[2:4]] == [elided_stub("tool0", 100), "y" * 99]


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [Message.system("only a prompt")],
        [Message.system("p"), *tool_turn(0, ["small"])],
        [Message.system("p"), Message.user("q"), Message.assistant(BIG)],  # not a tool result
    ],
    ids=["empty", "system-only", "nothing-bulky", "bulky-reply"],
)
def test_the_elider_has_nothing_to_do_without_bulky_tool_output(messages: list[Message]) -> None:
    """No tool result at the threshold: None, so nothing is written."""
    assert ToolOutputElider().compact(request(messages)) is None


def test_an_elided_stub_is_not_elided_again() -> None:
    """A second pass over its own output finds nothing to do."""
    messages = tool_turn(0, [BIG])
    out = ToolOutputElider().compact(request(messages))
    assert out is not None
    assert ToolOutputElider().compact(request(out)) is None


# -- through the worker's write-back ------------------------------------------------------------


def bulky_history(client: Any, n: int = 4) -> RedisHistory:
    """A prompt, then ``n`` turns each with one bulky tool result."""
    history = RedisHistory(client, "conv", namespace="tenant", token_counter="heuristic")
    history.append(Message.system("prompt", id="sys"))
    for i in range(n):
        history.append_many(tool_turn(i, [BIG + str(i)], ["search"]))
    return history


def test_the_elider_compacts_the_old_turns_and_keeps_the_tail_whole(sync_client: Any) -> None:
    """Old bulky results are stubbed, the last turn is untouched, every id stays in place,
    the transcript still holds the originals, and turns and the next append work."""
    history = bulky_history(sync_client)
    before = history.snapshot()
    estimate = history.token_estimate() or 0
    result = run_compaction(history, FakeSummarizer(), POLICY, compactor=ToolOutputElider())
    assert result.status == "compacted"
    assert result.dropped == 1 + 3 * 4  # the prompt and three whole turns were rewritten
    assert result.tokens_freed > 0
    after = history.snapshot()
    assert [m.id for m in after] == [m.id for m in before]
    assert [m.content for m in after if m.role == "tool"] == [
        *(elided_stub("search", 5001),) * 3,
        BIG + "3",
    ]
    assert history.transcript() == before
    assert (history.token_estimate() or 0) == estimate - result.tokens_freed
    assert [len(t.tool_pairs) for t in history.turns()] == [1, 1, 1, 1]
    assert history.compaction_stats().tokens_freed == result.tokens_freed
    history.append(Message.user("and now?"))
    assert history.turns()[-1].user == history.snapshot()[-1]


def test_a_custom_compactor_can_keep_turns_and_summarize_others(sync_client: Any) -> None:
    """A summary and a kept turn replace the prefix; the compactor was told the conversation
    and the policy, and the transcript holds every original exactly once."""
    history = bulky_history(sync_client)
    before = history.snapshot()
    summarizer = FakeSummarizer()
    result = run_compaction(history, summarizer, POLICY, compactor=KeepLastTurn())
    assert result.status == "compacted"
    after = history.snapshot()
    assert after[0].metadata["summary"] is True
    assert after[0].metadata["for"] == {
        "namespace": "tenant",
        "conversation_id": "conv",
        "keep_last_turns": 1,
    }
    assert after[1:] == before[9:], "the prefix's last turn and the tail are kept"
    assert [m.id for m in summarizer.calls[0]] == [m.id for m in before[:9]]
    assert history.transcript() == before
    (first, *_) = history.turns()
    assert first.lead == (after[0],)


def test_the_default_compactor_is_the_summary_of_the_prefix(sync_client: Any) -> None:
    """Without a compactor, and with SummarizingCompactor, the same summary is written."""
    results = []
    for compactor in (None, SummarizingCompactor()):
        sync_client.flushall()
        history = bulky_history(sync_client)
        run_compaction(history, FakeSummarizer("Previously: x"), POLICY, compactor=compactor)
        (summary, *rest) = history.snapshot()
        results.append((summary.content, summary.metadata["covers"], [m.id for m in rest]))
    assert results[0] == results[1]
    assert results[0][0] == "prompt\n\nPreviously: x"


def test_nothing_to_elide_exhausts_and_writes_nothing(client: fakeredis.FakeRedis) -> None:
    """A compactor with nothing to do reports exhausted; the conversation is untouched."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    result = run_compaction(history, FakeSummarizer(), POLICY, compactor=ToolOutputElider())
    assert result.status == "exhausted"
    assert history.entries() == before
    assert history.compaction_state().is_exhausted()
    assert not client.exists(history.keys.lock)


class KeepAll:
    """A compactor that keeps every turn it is given, as it was."""

    def compact(self, request: CompactorRequest) -> list[Turn]:
        """The turns, unchanged."""
        return list(request.turns)


def test_a_compactor_returning_the_prefix_unchanged_writes_nothing(
    client: fakeredis.FakeRedis,
) -> None:
    """Kept turns identical to the prefix change nothing: exhausted, no write, no archive."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    assert run_compaction(history, FakeSummarizer(), POLICY, compactor=KeepAll()).status == (
        "exhausted"
    )
    assert history.entries() == before
    assert not client.exists(history.keys.archive)


def test_a_bad_compactor_stops_the_worker_before_any_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`redis-history worker --compactor` with an unknown name exits 2 with the reason."""
    assert main(["worker", "--burst", "--compactor", "no-such-compactor"]) == 2
    assert "unknown compactor 'no-such-compactor'" in capsys.readouterr().err


@pytest.fixture
def client() -> fakeredis.FakeRedis:
    """A fake store."""
    return fakeredis.FakeRedis()


class Returning:
    """A compactor that returns whatever it was built with."""

    def __init__(self, result: object) -> None:
        self.result = result

    def compact(self, request: CompactorRequest) -> Any:
        """The result given."""
        return self.result


def bad_results(history: RedisHistory) -> dict[str, object]:
    """Results a buggy compactor might return for ``history``'s prefix."""
    messages = history.snapshot()
    return {
        "text": "a summary, not messages",
        "one message": Message.system("s"),
        "a dict in the list": [{"role": "system", "content": "s"}],
        "orphan result": [Message.tool("r", tool_call_id="nowhere")],
        "a call before the summary": [
            Message.user("q"),
            Message.assistant("", tool_calls=[ToolCall(id="k", name="f")]),
            Message.tool("r", tool_call_id="k"),
            Message.system("s"),
        ],
        "open call": [
            Message.user("q"),
            Message.assistant("", tool_calls=[ToolCall(id="k", name="f")]),
        ],
        "a tail id": [Message.system("s", id=messages[-1].id)],
        "an id twice": [Message.system("s", id="same"), Message.system("t", id="same")],
    }


@pytest.mark.parametrize(
    "case",
    [
        "text",
        "one message",
        "a dict in the list",
        "orphan result",
        "a call before the summary",
        "open call",
        "a tail id",
        "an id twice",
    ],
)
def test_a_buggy_compactor_is_refused_and_nothing_is_written(
    client: fakeredis.FakeRedis, case: str
) -> None:
    """A result that is not messages, or would break role order, tool pairing or unique ids
    with the tail, raises CompactorError; nothing is written, the lock is freed."""
    history = RedisHistory(client, "c", namespace="ns", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    with pytest.raises(CompactorError, match=r"Returning\.compact returned") as refused:
        run_compaction(
            history, FakeSummarizer(), POLICY, compactor=Returning(bad_results(history)[case])
        )
    assert (refused.value.conversation_id, refused.value.namespace) == ("c", "ns")
    assert history.entries() == before
    assert history.compaction_state() == CompactionState.ready()
    assert not client.exists(history.keys.lock)


def test_a_compactor_that_unpairs_a_call_is_refused(client: fakeredis.FakeRedis) -> None:
    """Dropping one tool result leaves its call open: refused before anything is written."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    with pytest.raises(CompactorError, match="do not fit"):
        run_compaction(history, FakeSummarizer(), POLICY, compactor=Unpaired())
    assert history.entries() == before


class Truncating:
    """Truncates the conversation into its prefix on its first call (a pod's rollback racing
    the compaction), then keeps the last turn like KeepLastTurn."""

    def __init__(self, history: RedisHistory, keep: int) -> None:
        self.history, self.keep, self.calls = history, keep, 0

    def compact(self, request: CompactorRequest) -> Any:
        """Truncate on the first call; summarize like KeepLastTurn every time."""
        self.calls += 1
        if self.calls == 1:
            self.history.truncate(self.keep)
        return KeepLastTurn().compact(request)


def test_a_custom_compactor_racing_a_truncate_is_stale_then_retried(
    client: fakeredis.FakeRedis,
) -> None:
    """The fenced write-back refuses a custom compactor's stale prefix; the retry compacts
    the fresh one, and the truncated messages appear nowhere."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(6))
    messages = history.snapshot()
    compactor = Truncating(history, 13)  # the prompt and three turns
    assert run_compaction(history, FakeSummarizer(), POLICY, compactor=compactor).status == (
        "compacted"
    )
    assert compactor.calls == 2
    live = history.snapshot()
    assert live[0].metadata["summary"] is True
    assert [m.id for m in live[1:]] == [m.id for m in messages[5:13]]
    assert [m.id for m in history.transcript()] == [m.id for m in messages[:13]]


class Stealing:
    """Hands the lock to someone else while it runs, as an expiry and another worker would."""

    def __init__(self, client: fakeredis.FakeRedis, history: RedisHistory) -> None:
        self.client, self.history = client, history

    def compact(self, request: CompactorRequest) -> Any:
        """Overwrite the lock, then return a valid replacement."""
        self.client.set(self.history.keys.lock, "another worker's token")
        return ToolOutputElider(min_bytes=1).compact(request)


def test_a_custom_compactor_that_lost_the_lock_cannot_write(client: fakeredis.FakeRedis) -> None:
    """The fencing token refuses a custom compactor's write-back once the lock changed hands."""
    history = RedisHistory(client, "c", token_counter="heuristic")
    history.append_many(turns(4))
    before = history.entries()
    result = run_compaction(history, FakeSummarizer(), POLICY, compactor=Stealing(client, history))
    assert result.status == "lock_lost"
    assert history.entries() == before
    assert client.get(history.keys.lock) == b"another worker's token"


# -- summarizers are told the conversation ------------------------------------------------------


class ContextualSummarizer:
    """A summarizer that takes the conversation's context and records it."""

    def __init__(self) -> None:
        self.contexts: list[CompactionContext | None] = []

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """Record the context; summarize as the conversation's id."""
        self.contexts.append(context)
        return f"Previously in {context.conversation_id if context else '?'}"


class KwargsSummarizer:
    """A summarizer that takes keyword arguments it does not name."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def summarize(self, messages: Sequence[Message], **options: Any) -> str:
        """Record the keywords."""
        self.seen = options
        return "Previously: kwargs"


def test_a_summarizer_that_takes_a_context_is_told_the_conversation(
    client: fakeredis.FakeRedis,
) -> None:
    """With a context parameter, the summarizer gets the namespace, id and policy."""
    history = RedisHistory(client, "c", namespace="ns", token_counter="heuristic")
    history.append_many(turns(4))
    summarizer = ContextualSummarizer()
    assert run_compaction(history, summarizer, POLICY).status == "compacted"
    assert summarizer.contexts == [CompactionContext("ns", "c", POLICY)]
    assert history.snapshot()[0].content.endswith("Previously in c")


def test_a_summarizer_taking_keywords_gets_the_context() -> None:
    """A summarizer whose summarize takes **kwargs is passed context= too."""
    summarizer = KwargsSummarizer()
    compacted = SummarizingCompactor(summarizer).compact(request(turns(2)))
    assert set(summarizer.seen) == {"context"}
    assert compacted[0].content.endswith("Previously: kwargs")


# -- grouping what a compactor wrote ----------------------------------------------------------


def test_kept_turns_written_as_summaries_group_as_turns() -> None:
    """Entries splice_prefix wrote that read as turns group as turns, not as one lead."""
    messages = [Message.system("p"), *tool_turn(0, ["r"]), *tool_turn(1, ["s"])]
    entries = [
        {"t": 1, "s": i < 5, "m": json.loads(m.model_dump_json())} for i, m in enumerate(messages)
    ]
    from redis_history import Entry  # noqa: PLC0415  (only this test builds entries)

    grouped = group_entries([Entry.model_validate(e) for e in entries])
    assert [t.lead for t in grouped] == [(messages[0],), ()]
    assert [t.user for t in grouped] == [messages[1], messages[5]]
    assert grouped == [
        Turn(lead=(messages[0],), user=messages[1], steps=grouped[0].steps),
        grouped[1],
    ]
