"""``redis-history demo``: simulated agent pods sharing conversations, with the invariants checked.

Several pod processes talk on the same conversations at once, each turn written
atomically with ``append_many``. Meanwhile this process compacts the oldest
turns with ``splice_prefix`` (fenced on the ids it summarized), and at the end
rolls back a failed turn with ``truncate``. The check at the end proves that
every message a pod wrote is in the conversation or its archive exactly once,
in the pod's order, with every turn contiguous and the live list well formed.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from typing import Any, TextIO

import redis

from redis_history.errors import HistoryError, StaleSnapshotError
from redis_history.history import RedisHistory
from redis_history.models import Message, ToolCall
from redis_history.roles import RoleState
from redis_history.server import RedisServer

__all__ = ["DemoReport", "run_demo"]

SYSTEM_PROMPT = "You are a helpful travel agent. Use tools for facts."
NAMESPACE = "demo"
TURN_LENGTH = 4


def _turn(pod: int, n: int, conversation: str) -> list[Message]:
    """One agent turn: a question, a tool call and its result, and the answer."""
    call_id = f"call-{pod}-{n}"
    city = ["Lisbon", "Osaka", "Quito", "Tromsø", "Dakar"][n % 5]
    prefix = f"{conversation}-p{pod}-t{n:03d}"
    return [
        Message.user(f"Pod {pod}, turn {n}: what is the weather in {city}?", id=f"{prefix}-u"),
        Message.assistant(
            "",
            tool_calls=[ToolCall(id=call_id, name="weather", arguments={"city": city})],
            id=f"{prefix}-c",
        ),
        Message.tool(
            f'{{"city": "{city}", "temp_c": {10 + n % 20}}}', tool_call_id=call_id, id=f"{prefix}-r"
        ),
        Message.assistant(f"It is {10 + n % 20} °C in {city} right now.", id=f"{prefix}-a"),
    ]


def _pod(  # noqa: PLR0917  (a multiprocessing target takes positional arguments)
    url: str, pod: int, conversations: Sequence[str], turns: int, start: Any, out: Queue[Any]
) -> None:
    """One simulated agent process: ``turns`` turns spread over the conversations."""
    written: dict[str, list[str]] = {c: [] for c in conversations}
    histories = {c: RedisHistory.from_url(url, c, namespace=NAMESPACE) for c in conversations}
    start.wait()
    for n in range(turns):
        conversation = conversations[(pod + n) % len(conversations)]
        history = histories[conversation]
        messages = _turn(pod, n, conversation)
        history.append_many(messages)
        estimate = history.token_estimate() or 0
        history.record_input_tokens(estimate)  # what the LLM would have reported
        written[conversation].extend(m.id for m in messages)
    out.put((pod, written))


def _summarize(messages: Sequence[Message]) -> Message:
    """A stand-in summarizer: keeps the system prompt, counts what it replaced."""
    questions = [m.content for m in messages if m.role == "user"]
    return Message.system(
        f"{SYSTEM_PROMPT}\n\nSummary of {len(messages)} earlier messages: "
        f"{len(questions)} weather questions, the last was {questions[-1]!r}.",
        metadata={"summary_of": len(messages)},
    )


def compact(history: RedisHistory) -> int:
    """Summarize the older half of the conversation's turns; 0 if it was stale or too short."""
    snapshot = history.snapshot()
    boundaries = [i for i, m in enumerate(snapshot) if m.role == "user"]
    if len(boundaries) < 4:
        return 0
    cut = boundaries[len(boundaries) // 2]
    prefix = snapshot[:cut]
    try:
        return history.splice_prefix(cut, _summarize(prefix), expected_ids=[m.id for m in prefix])
    except StaleSnapshotError:
        return 0


@dataclass
class DemoReport:
    """What the demo did and whether every invariant held."""

    conversations: dict[str, dict[str, int]] = field(default_factory=dict)
    splices: int = 0
    rolled_back: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every invariant held."""
        return not self.problems


def check_conversation(
    history: RedisHistory, written: dict[int, list[str]], report: DemoReport
) -> None:
    """Record a problem for every invariant the conversation breaks."""
    name = history.conversation_id
    transcript = [m.id for m in history.transcript() if m.role != "system"]
    if len(transcript) != len(set(transcript)):
        report.problems.append(f"{name}: a message is in the list and the archive twice")
    seen = set(transcript)
    for pod, ids in written.items():
        missing = [i for i in ids if i not in seen]
        if missing:
            report.problems.append(f"{name}: pod {pod} lost {len(missing)} messages")
        if [i for i in transcript if i in set(ids)] != ids:
            report.problems.append(f"{name}: pod {pod}'s messages are out of order")
    for start in range(0, len(transcript), TURN_LENGTH):
        turn_ids = transcript[start : start + TURN_LENGTH]
        if len({i.rsplit("-", 1)[0] for i in turn_ids}) != 1:
            report.problems.append(f"{name}: a turn was interleaved at {start}")
            break
    live = history.snapshot()
    try:
        RoleState().advance_all(live)
    except HistoryError as exc:
        report.problems.append(f"{name}: the live list is not well formed: {exc}")
    entries = history.entries()
    report.conversations[name] = {
        "live": len(live),
        "archived": len(history.transcript()) - sum(1 for e in entries if not e.summary),
        "summaries": sum(1 for e in entries if e.summary),
        "tokens": sum(e.tokens for e in entries),
    }


@dataclass
class _Pods:
    """The running pod processes and where they report what they wrote."""

    processes: list[Any]
    start: Any
    results: Any

    @classmethod
    def launch(cls, url: str, pods: int, names: list[str], turns: int) -> _Pods:
        method = "fork" if sys.platform == "linux" else "spawn"
        context: Any = multiprocessing.get_context(method)
        start, results = context.Event(), context.Queue()
        processes = [
            context.Process(target=_pod, args=(url, pod, names, turns, start, results), daemon=True)
            for pod in range(pods)
        ]
        for process in processes:
            process.start()
        return cls(processes, start, results)


def _compact_while_talking(
    pods: _Pods, histories: dict[str, RedisHistory], report: DemoReport, say: Callable[[str], None]
) -> dict[str, dict[int, list[str]]]:
    """Compact every conversation in a loop until every pod has reported its writes."""
    written: dict[str, dict[int, list[str]]] = {name: {} for name in histories}
    pods.start.set()
    finished = 0
    while finished < len(pods.processes):
        for history in histories.values():
            dropped = compact(history)
            if dropped:
                report.splices += 1
                say(f"  splice_prefix: {history.conversation_id} replaced {dropped} messages")
        while not pods.results.empty():
            pod, by_conversation = pods.results.get()
            finished += 1
            for name, ids in by_conversation.items():
                written[name][pod] = ids
        time.sleep(0.01)
    for process in pods.processes:
        process.join()
        if process.exitcode != 0:
            report.problems.append(f"a pod exited with {process.exitcode}")
    return written


def _roll_back_a_failed_turn(history: RedisHistory, report: DemoReport) -> None:
    """Store a question, pretend the LLM call failed, and truncate back."""
    before = history.len()
    history.append(Message.user("And the weather on Mars?", id="failed-turn"))
    report.rolled_back = history.truncate(before)
    if history.len() != before or any(m.id == "failed-turn" for m in history.snapshot()):
        report.problems.append("truncate did not roll back the failed turn")


def run_demo(
    url: str, *, pods: int = 4, conversations: int = 3, turns: int = 30, out: TextIO = sys.stdout
) -> DemoReport:
    """Run the pods against ``url``, compacting while they talk; returns the checked report."""

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    names = [f"trip-{i}" for i in range(conversations)]
    client = redis.Redis.from_url(url)
    histories = {n: RedisHistory(client, n, namespace=NAMESPACE) for n in names}
    for history in histories.values():
        history.delete()
        history.append(Message.system(SYSTEM_PROMPT, id=f"{history.conversation_id}-system"))
    running = _Pods.launch(url, pods, names, turns)
    say(f"{pods} pods x {turns} turns on {conversations} conversations, compacting meanwhile:")
    report = DemoReport()
    began = time.perf_counter()
    written = _compact_while_talking(running, histories, report, say)
    elapsed = time.perf_counter() - began

    say(f"  a turn fails after its question was stored: truncate({histories[names[0]].len()})")
    _roll_back_a_failed_turn(histories[names[0]], report)
    for name in names:
        check_conversation(histories[name], written[name], report)
    client.close()

    say(f"done in {elapsed:.2f}s: {report.splices} splices, {report.rolled_back} rolled back")
    for name, stats in report.conversations.items():
        say(
            f"  {name}: {stats['live']} live messages ({stats['summaries']} summary), "
            f"{stats['archived']} archived, {stats['tokens']} tokens live"
        )
    if report.ok:
        say(
            "invariants hold: every message in the list or archive exactly once, in each "
            "pod's order, turns unbroken, roles and tool pairs well formed"
        )
    for problem in report.problems:
        say(f"PROBLEM: {problem}")
    return report


@contextmanager
def redis_for_demo(url: str | None, out: TextIO = sys.stdout) -> Iterator[str]:
    """``url`` or ``REDIS_HISTORY_URL`` if set, else an embedded server for the demo's lifetime."""
    url = url or os.environ.get("REDIS_HISTORY_URL")
    if url:
        yield url
        return
    with RedisServer() as server:
        print(f"started an embedded Redis ({server.executable}) at {server.url}", file=out)
        yield server.url
