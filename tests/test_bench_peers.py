"""The peer benchmark stays runnable (a quick run, the library alone) and its traffic as stated."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from bench_runs import load_bench, run_bench

from redis_history import Message, ToolCall
from redis_history.roles import RoleState


def test_realistic_mix_is_seeded_sized_and_in_role_order() -> None:
    """Same seed, same traffic; sizes in the stated ranges; redis-history's role rules accept it."""
    traffic = load_bench("traffic")
    turns = traffic.realistic_turns(600)
    assert [m.wire_json() for m in traffic.flatten(turns)] == [
        m.wire_json() for m in traffic.flatten(traffic.realistic_turns(600))
    ]
    kinds = set()
    for m in traffic.flatten(turns):
        kinds.add(m.kind)
        if m.role == "user":
            assert 50 <= len(m.content) <= 500
        elif m.role == "tool":
            assert 1024 <= len(m.content.encode()) <= 21 * 1024
            json.loads(m.content)
        elif not m.tool_calls:
            assert 200 <= len(m.content) <= 2000
    _follow_role_rules(traffic.flatten(turns))
    assert kinds == {"text", "code", "cjk", "json", "calls"}
    short = traffic.flatten(traffic.short_turns(100))
    assert all(40 <= len(m.content) <= 56 for m in short)


def _follow_role_rules(messages: Sequence[Any]) -> None:
    """Fails unless redis-history's role rules accept ``messages`` in order."""
    state = RoleState()
    for m in messages:
        state.advance(
            Message(
                role=m.role,
                content=m.content,
                tool_calls=tuple(
                    ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in m.tool_calls
                ),
                tool_call_id=m.tool_call_id,
            )
        )


def test_tool_heavy_mix_is_whole_turns_with_results_of_2_to_40_kb_of_four_kinds() -> None:
    """Every turn is a user message, one tool call, its result (2-40 KB of JSON, HTML, logs
    or source code, sized in the message's JSON) and a reply; about 3.6 KB a message; seeded."""
    traffic = load_bench("traffic")
    turns = traffic.tool_heavy_turns(800)
    messages = traffic.flatten(turns)
    assert [m.wire_json() for m in messages] == [
        m.wire_json() for m in traffic.flatten(traffic.tool_heavy_turns(800))
    ]
    assert all(
        [m.role for m in turn] == ["user", "assistant", "tool", "assistant"] for turn in turns
    )
    results = [m for m in messages if m.role == "tool"]
    assert {m.kind for m in results} == set(traffic.TOOL_RESULT_KINDS)
    for m in results:
        assert 2 * 1024 <= len(m.wire_json().encode()) <= 42 * 1024
    json.loads(next(m for m in results if m.kind == "api-json").content)
    sizes = [len(m.wire_json().encode()) for m in messages]
    assert 3_200 <= sum(sizes) / len(sizes) <= 4_200
    _follow_role_rules(messages)


def test_chat_mix_is_user_and_assistant_texts_of_about_600_bytes() -> None:
    """The chat mix alternates user and assistant texts, no tools, about 600 bytes of JSON
    a message."""
    traffic = load_bench("traffic")
    messages = traffic.flatten(traffic.chat_turns(2000))
    assert [m.role for m in messages[:4]] == ["user", "assistant", "user", "assistant"]
    assert not any(m.tool_calls or m.role == "tool" for m in messages)
    sizes = [len(m.wire_json().encode()) for m in messages]
    assert 500 <= sum(sizes) / len(sizes) <= 800
    _follow_role_rules(messages)


def test_every_round_calls_each_contestant_once_behind_changing_neighbours() -> None:
    """The append and snapshot rounds are seeded shuffles: each a permutation of every
    contestant, the same for the same seed, and no contestant always behind the same one."""
    shuffled = load_bench("bench_peers").shuffled
    labels = [f"c{i}" for i in range(6)]
    rounds = list(shuffled(labels, 200))
    assert all(sorted(order) == labels for order in rounds)
    assert rounds == list(shuffled(labels, 200))
    for label in labels:
        behind = {order[order.index(label) - 1] for order in rounds if order[0] != label}
        assert len(behind) == len(labels) - 1


@pytest.mark.real_redis
@pytest.mark.slow  # its 8 writers are processes
def test_quick_peer_benchmark_prints_every_row_against_the_library_alone() -> None:
    """``bench_peers.py --quick --only redis-history --staging`` runs end to end on both mixes
    (the staging variants included); the rest show as skipped."""
    out = run_bench(
        "bench_peers.py", "--quick", "--only", "redis-history", "--staging", "--markdown"
    )
    for row in (
        "| append, median |",
        "| append, p99 |",
        "| 8 writers on one conversation, throughput (raw / store) |",
        "| 8 writers, against a floor of one RPUSH per message |",
        "| snapshot of 100 |",
        "| snapshot of 500 |",
        "| Redis memory per message (100 messages) |",
        "| Redis memory per message / its JSON's bytes |",
        "### chat mix (~600 B messages)",
        "### tool-heavy mix (2-40 KB tool results)",
        "redis-history (heuristic counter)",
        "reference: minimal scripted append",
        "reference: encode + RPUSH",
        "redis-history, never staged",
        "redis-history, every append staged",
        "role | count | mean chars",
        "A bare `RPUSH` sent the way redis-history sends its commands",
    ):
        assert row in out
    assert out.count("skipped: not selected (--only)") == 4
    assert out.count("| Redis memory per message / its JSON's bytes |") == 2


@pytest.mark.real_redis
def test_snapshot_benchmark_runs_and_checks_the_chat_completions_read() -> None:
    """``bench_snapshot.py`` runs end to end on both mixes (it asserts that
    ``snapshot_openai()`` equals ``to_openai()`` of the snapshot before timing)."""
    out = run_bench("bench_snapshot.py", "--sizes", "10,40", "--rounds", "20")
    for row in ("| realistic | 10 |", "| realistic | 40 |", "| short | 10 |", "| short | 40 |"):
        assert row in out
    assert "nan" not in out


@pytest.mark.real_redis
def test_compression_benchmark_prints_every_codec_and_list_compress_depth() -> None:
    """``bench_compression.py --quick`` measures the codecs on the tool-heavy mix and the
    store's envelopes under ``list-compress-depth`` 0 and 1."""
    out = run_bench("bench_compression.py", "--quick")
    for row in (
        "| zstd 1 |",
        "| zlib 1 |",
        "| none |",
        "| MEMORY USAGE of the list per message |",
        "| snapshot(), median µs |",
        "compressed, depth 1",
    ):
        assert row in out


@pytest.mark.real_redis
def test_kinds_benchmark_prints_each_kind_of_message() -> None:
    """``bench_kinds.py --quick`` times the floor and the store on every kind of a tool-heavy
    turn, the store's send apart from the rest, and the CPU a message costs each."""
    out = run_bench("bench_kinds.py", "--quick")
    for row in ("| user |", "| assistant |", "| tool calls |", "| every message | 100.0% |"):
        assert row in out
    assert "| store: in the send | store: the rest |" in out
    assert "| CPU per message, µs | the writer | Redis | in all |" in out


def test_read_cost_benchmark_times_both_readers_and_its_child_reads(tmp_path: Path) -> None:
    """``bench_read_cost.py --quick`` times the floor's and the store's decoding of both
    mixes; the child that callgrind runs reads each reader's inputs from the pickle given."""
    out = run_bench("bench_read_cost.py", "--quick")
    assert "| chat | - | - | - | - |" in out
    assert "| tool-heavy | - | - | - | - |" in out
    assert "nan" not in out
    bench_read_cost = load_bench("bench_read_cost")
    inputs = tmp_path / "inputs.pickle"
    inputs.write_bytes(pickle.dumps(bench_read_cost.inputs(["chat"], 12)))
    for reader in bench_read_cost.READERS:
        run_bench("bench_read_cost.py", "--child", str(inputs), "chat", reader, "2")


@pytest.mark.real_redis
def test_script_cost_benchmark_prints_each_part_of_a_scripted_append() -> None:
    """``bench_script_cost.py --quick`` times the command, an empty script, the minimal
    one and both of the store's append scripts, the wait's slope and the client's CPU."""
    out = run_bench("bench_script_cost.py", "--quick")
    for row in (
        "| RPUSH of the envelope |",
        "| minimal scripted append |",
        "| the store's general script, append-5.lua |",
        "| the store's small append, append_small-4.lua |",
        "| loop 800 |",
        "Each µs of Redis's time cost the client",
        "| RedisHistory.append (reply at hand) |",
    ):
        assert row in out
