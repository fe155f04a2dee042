"""A soak: whether stored conversations stay bounded while pods write and workers compact.

Run: ``python benchmarks/bench_soak.py [--mode raw|manager|both] [--pods N] [--workers N]
[--seconds S] [--conversations N] [--sample S] [--llm-latency S] [--quick] [--markdown]
[--json PATH]``.

Each mode starts its own ``redis-server``, ``--workers`` workers the way a deployment
runs them (``python -m redis_history worker`` with the extractive summarizer and the
heuristic counter) and ``--pods`` pod processes (forked) that split ``--conversations``
conversations between them and write one whole agent turn to each in turn, for
``--seconds``: a user message, then on 40% of turns an assistant tool call, its result
(1-20 KB of text) and the answer, else the answer alone. Each turn waits
``--llm-latency`` seconds for its simulated model.

- ``raw``: ``advance_turn``, ``append_many`` of the turn, ``maybe_compact`` with a soft
  limit of 2,000 tokens, the last 2 turns kept, a cooldown of 1 turn and the archive
  capped at 200 messages.
- ``manager``: the README's pod loop: ``advance_turn``, ``HistoryManager.prepare_messages``
  fits the snapshot and the user message to 3,000 tokens (timed), the turn is appended,
  the request's tokens recorded, ``on_turn_complete``, ``maybe_compact`` with a soft limit
  of 4,000 tokens (the archive uncapped).

Every ``--sample`` seconds a row: live messages per conversation (``LLEN``, mean and max),
stored tokens (``compaction_facts().stored``, mean and max), the longest archive,
conversations ``Exhausted``, Redis's ``used_memory``, RQ's keys (``SCAN`` of ``rq:*``),
compactions so far, turns a second, and (manager) the p50 and p99 of ``prepare_messages``
over the interval. At the end the pods are stopped (SIGTERM), the workers drain the queue
and stop, a last row is taken, and each conversation's transcript is checked against what
its pod had acknowledged: every message once, in the pod's order, none missing but the
oldest, which only the archive's cap may drop (the meta hash's ``adropped`` counts them);
and no job may have failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import os
import random
import re
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.queues import Queue
from pathlib import Path
from queue import Empty
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_compaction import load, percentile, versions

from redis_history import CompactionPolicy, Message, RedisHistory, ToolCall
from redis_history.compaction.jobs import CompactionQueue, compaction_queue
from redis_history.context import HistoryManager, HistoryManagerConfig
from redis_history.demo.server import RedisServer

MODES = ("raw", "manager")
NAMESPACE = "soak"
QUEUE = "bench-soak"
PROMPT = "You are a research agent. Use the search tool for facts, then answer briefly."
WORKER_COMMAND = [sys.executable, "-m", "redis_history", "worker"]
"""How a deployment starts a worker (``redis-history worker``)."""
RAW_POLICY = CompactionPolicy(
    soft_tokens=2000, keep_last_turns=2, cooldown_turns=1, min_messages=2, archive_max_messages=200
)
MANAGER_POLICY = CompactionPolicy(
    soft_tokens=4000, keep_last_turns=2, cooldown_turns=1, min_messages=2
)
MANAGER_BUDGET = 3000
"""The tokens ``prepare_messages`` fits each request to."""
TOOL_SHARE = 0.4
TOOL_BYTES = (1024, 20 * 1024)
READY = -1
"""What a pod reports as its turns once it is ready to start."""
REPORT_EVERY = 0.25
"""Seconds between a pod's reports of its turns and timings."""
GRACE = 15.0
"""Seconds a pod or worker has after SIGTERM before it is killed."""
DRAIN = 120.0
"""Seconds the workers may take to drain the queue once the pods stopped."""
_OUTCOME = re.compile(r"compaction job=\S+ conversation=\S+ (\w+)")
_VOCABULARY = [
    "".join(random.Random(i).choices(string.ascii_lowercase, k=2 + i % 9)) for i in range(3000)
]
"""Pseudo-words of 2-10 letters, the texts of the turns are drawn from."""


def words(rng: random.Random, count: int) -> str:
    """``count`` words of the vocabulary."""
    return " ".join(rng.choices(_VOCABULARY, k=count))


def text_of(rng: random.Random, size: int) -> str:
    """About ``size`` bytes of words."""
    return words(rng, size // 6 + 1)[:size]


def agent_turn(rng: random.Random, tag: str) -> list[Message]:
    """One agent turn: a question, and on 40% of turns a search and its 1-20 KB result, then
    the answer; every message's id starts with ``tag``."""
    user = Message.user(words(rng, rng.randint(8, 60)), id=f"{tag}-u")
    answer = Message.assistant(words(rng, rng.randint(30, 150)), id=f"{tag}-a")
    if rng.random() >= TOOL_SHARE:
        return [user, answer]
    call = ToolCall(id=f"{tag}-call", name="search", arguments={"query": words(rng, 4)})
    return [
        user,
        Message.assistant("", tool_calls=[call], id=f"{tag}-c"),
        Message.tool(text_of(rng, rng.randint(*TOOL_BYTES)), tool_call_id=call.id, id=f"{tag}-r"),
        answer,
    ]


@dataclass(frozen=True)
class PodPlan:
    """What one pod process writes, and where it leaves the ids it wrote."""

    mode: str
    url: str
    pod: int
    conversations: tuple[str, ...]
    llm_latency: float
    record: Path


class _Warnings(logging.Handler):
    """Counts the store's warnings (a conversation compaction gave up on) instead of printing
    them between the rows."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


class _Stop:
    """Set by SIGTERM: the pod ends after the turn in hand."""

    requested = False

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True


class Pod:
    """One pod's conversations: a history each (and a manager each in manager mode)."""

    def __init__(self, plan: PodPlan, client: redis.Redis) -> None:
        self.plan = plan
        self.queue = compaction_queue(client, name=QUEUE)
        self.histories = {
            c: RedisHistory(client, c, namespace=NAMESPACE) for c in plan.conversations
        }
        self.managers = {
            c: HistoryManager(HistoryManagerConfig(), history=h) for c, h in self.histories.items()
        }
        self.rng = random.Random(plan.pod)
        self.written: dict[str, list[str]] = {c: [] for c in plan.conversations}
        """The ids of every message ``append_many`` acknowledged, by conversation, in order."""

    def warm_up(self) -> None:
        """Load the managers' token counter before the clock starts (it builds its encoding
        once a process)."""
        if self.plan.mode == "manager":
            manager = next(iter(self.managers.values()))
            manager.prepare_messages(MANAGER_BUDGET, PROMPT, [], [Message.user("Ready?")])

    def turn(self, conversation: str, n: int) -> float | None:
        """One whole turn; the seconds ``prepare_messages`` took (manager mode)."""
        history = self.histories[conversation]
        history.advance_turn()
        messages = agent_turn(self.rng, f"{conversation}-t{n}")
        if self.plan.mode == "raw":
            time.sleep(self.plan.llm_latency)
            self.append(history, messages)
            history.maybe_compact(self.queue, RAW_POLICY)
            return None
        manager = self.managers[conversation]
        began = time.perf_counter()
        prepared = manager.prepare_messages(
            MANAGER_BUDGET, PROMPT, history.snapshot(), messages[:1]
        )
        took = time.perf_counter() - began
        time.sleep(self.plan.llm_latency)
        self.append(history, messages)
        history.record_input_tokens(prepared.diagnostics.total)
        manager.on_turn_complete(prepared.dropped, "soak")
        history.maybe_compact(self.queue, MANAGER_POLICY)
        return took

    def append(self, history: RedisHistory, messages: list[Message]) -> None:
        history.append_many(messages)
        self.written[history.conversation_id].extend(m.id for m in messages)


def run_pod(plan: PodPlan, start: Any, reports: Queue[Any]) -> None:
    """A pod process: turns on its conversations in turn until SIGTERM, reporting its turns
    and timings every ``REPORT_EVERY`` seconds; at the end it writes what it acknowledged to
    ``plan.record``."""
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops pods (SIGTERM)
    warnings = _Warnings()
    store_logger = logging.getLogger("redis_history")
    store_logger.addHandler(warnings)
    store_logger.propagate = False
    client = redis.Redis.from_url(plan.url)
    pod = Pod(plan, client)
    pod.warm_up()
    reports.put((plan.pod, READY, []))
    error: str | None = None
    turns, timings = 0, list[float]()
    while not start.wait(0.5) and not stop.requested:
        pass  # stopped before it started: the run failed elsewhere
    reported = time.monotonic()
    try:
        n = 0
        while not stop.requested:
            conversation = plan.conversations[n % len(plan.conversations)]
            took = pod.turn(conversation, n // len(plan.conversations))
            n, turns = n + 1, turns + 1
            if took is not None:
                timings.append(took * 1000)
            if time.monotonic() - reported >= REPORT_EVERY:
                reports.put((plan.pod, turns, timings))
                reported, turns, timings = time.monotonic(), 0, []
    except Exception as exc:  # reported, and the run fails on it
        error = f"{type(exc).__name__}: {exc}"
    reports.put((plan.pod, turns, timings))
    record = {"written": pod.written, "error": error, "warnings": warnings.count}
    plan.record.write_text(json.dumps(record))
    client.close()


@dataclass
class Pods:
    """The running pod processes, the event that starts them, where they report."""

    plans: list[PodPlan]
    processes: list[Any]
    start: Any
    reports: Queue[Any]

    @classmethod
    def launch(cls, plans: list[PodPlan]) -> Pods:
        context: Any = multiprocessing.get_context("fork")
        start, reports = context.Event(), context.Queue()
        processes = [
            context.Process(target=run_pod, args=(plan, start, reports), daemon=True)
            for plan in plans
        ]
        for process in processes:
            process.start()
        return cls(plans, processes, start, reports)

    def wait_ready(self) -> None:
        """Block until every pod has its clients and its counter ready."""
        ready = 0
        deadline = time.monotonic() + 60
        while ready < len(self.processes):
            if time.monotonic() > deadline or not all(p.is_alive() for p in self.processes):
                raise RuntimeError("a pod did not start")
            with contextlib.suppress(Empty):
                ready += self.reports.get(timeout=0.5)[1] == READY

    def collect(self, until: float) -> tuple[int, list[float]]:
        """The turns and ``prepare_messages`` timings (ms) reported until ``until``
        (``time.monotonic()``)."""
        turns, timings = 0, list[float]()
        while (left := until - time.monotonic()) > 0:
            try:
                _, n, took = self.reports.get(timeout=min(left, 0.5))
            except Empty:
                continue
            turns += n
            timings += took
        return turns, timings

    def stop(self) -> tuple[int, list[float]]:
        """SIGTERM every pod, drain their reports while they finish their turn, kill those
        still running after the grace period; what they reported meanwhile."""
        for process in self.processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        turns, timings = 0, list[float]()
        deadline = time.monotonic() + GRACE
        while any(p.is_alive() for p in self.processes) and time.monotonic() < deadline:
            n, took = self.collect(time.monotonic() + 0.2)
            turns, timings = turns + n, timings + took
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join()
        n, took = self.collect(time.monotonic() + 0.2)
        return turns + n, timings + took


class Workers:
    """``redis-history worker`` processes, each in its own process group, logging to a file."""

    def __init__(self, url: str, count: int, directory: Path) -> None:
        self.log_path = directory / "workers.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_HISTORY_")}
        env |= {
            "REDIS_HISTORY_URL": url,
            "REDIS_HISTORY_QUEUE": QUEUE,
            "REDIS_HISTORY_SUMMARIZER": "extractive",
            "REDIS_HISTORY_TOKEN_COUNTER": "heuristic",
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        with self.log_path.open("ab") as log:
            for _ in range(count):
                self.processes.append(
                    subprocess.Popen(
                        WORKER_COMMAND,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,  # a worker and its work horses: one group
                    )
                )

    def wait_ready(self, queue: CompactionQueue) -> None:
        """Block until every worker listens on the queue."""
        deadline = time.monotonic() + 60
        while queue.workers() < len(self.processes):
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                raise RuntimeError(f"a worker did not start:\n{self.log()[-2000:]}")
            time.sleep(0.05)

    def drain(self, queue: CompactionQueue) -> bool:
        """Wait until no job is queued or running; whether that happened in time."""
        deadline = time.monotonic() + DRAIN
        while queue.pending():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def outcomes(self) -> dict[str, int]:
        """Jobs run, by outcome (compacted, skipped, exhausted, ...), from the workers' logs."""
        return dict(Counter(_OUTCOME.findall(self.log())))

    def stop(self) -> None:
        """A warm shutdown (SIGTERM: a running job finishes), then SIGKILL of the group."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE
        for process in self.processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@dataclass
class Row:
    """The conversations and the server at one moment; timings over the interval before."""

    seconds: float
    live_mean: float
    live_max: int
    tokens_mean: float
    tokens_max: int
    archive_mean: float
    archive_max: int
    exhausted: int
    used_memory_mb: float
    rq_keys: int
    compactions: int
    turns_per_second: float | None
    prepare_p50_ms: float | None = None
    prepare_p99_ms: float | None = None


def sample(
    client: redis.Redis,
    histories: Sequence[RedisHistory],
    seconds: float,
    turns_per_second: float | None,
    timings: Sequence[float],
) -> Row:
    """One row: every conversation's lengths, tokens and state, Redis's memory, RQ's keys."""
    with client.pipeline(transaction=False) as pipe:
        for history in histories:
            pipe.llen(history.keys.msgs)
            pipe.llen(history.keys.archive)
        lengths = pipe.execute()
    live, archived = lengths[0::2], lengths[1::2]
    facts = [history.compaction_facts() for history in histories]
    compactions = sum(history.compaction_stats().compactions for history in histories)
    tokens = [f.stored for f in facts]
    return Row(
        seconds=round(seconds, 1),
        live_mean=statistics.fmean(live),
        live_max=max(live),
        tokens_mean=statistics.fmean(tokens),
        tokens_max=max(tokens),
        archive_mean=statistics.fmean(archived),
        archive_max=max(archived),
        exhausted=sum(f.state.is_exhausted() for f in facts),
        used_memory_mb=int(client.info("memory")["used_memory"]) / 2**20,
        rq_keys=sum(1 for _ in client.scan_iter(match="rq:*", count=1000)),
        compactions=compactions,
        turns_per_second=turns_per_second,
        prepare_p50_ms=percentile(timings, 50) if timings else None,
        prepare_p99_ms=percentile(timings, 99) if timings else None,
    )


COLUMNS = (
    ("s", "seconds", "{:.0f}"),
    ("live mean", "live_mean", "{:.1f}"),
    ("live max", "live_max", "{}"),
    ("tokens mean", "tokens_mean", "{:,.0f}"),
    ("tokens max", "tokens_max", "{:,}"),
    ("archive mean", "archive_mean", "{:.1f}"),
    ("archive max", "archive_max", "{}"),
    ("Exhausted", "exhausted", "{}"),
    ("used_memory", "used_memory_mb", "{:.1f} MB"),
    ("RQ keys", "rq_keys", "{}"),
    ("compactions", "compactions", "{:,}"),
    ("turns/s", "turns_per_second", "{:.0f}"),
    ("prepare p50", "prepare_p50_ms", "{:.1f} ms"),
    ("prepare p99", "prepare_p99_ms", "{:.1f} ms"),
)


def cells(row: Row) -> list[str]:
    """The row's figures, formatted as the columns say (``-`` for none)."""
    values = asdict(row)
    return ["-" if values[name] is None else form.format(values[name]) for _, name, form in COLUMNS]


def text_line(values: Sequence[str]) -> str:
    return "".join(f"{v:>13}" for v in values)


@dataclass
class Check:
    """What the transcripts and the queue say at the end."""

    acknowledged: int = 0
    """Messages the pods' ``append_many`` calls returned for."""
    in_transcripts: int = 0
    capped: int = 0
    """Acknowledged messages missing from a transcript, the oldest of it, where the
    archive's cap dropped at least as many entries: dropped by design."""
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    unacknowledged: int = 0
    """Messages in a transcript that no pod acknowledged (a turn cut by a kill)."""
    failed_jobs: int = 0
    rq_keys_without_ttl: int = 0
    """RQ's keys that never expire once the workers stopped: its queue's registries, and
    whatever else it keeps for good."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Jobs by outcome, from the workers' logs."""
    warnings: int = 0
    """Warnings the pods' ``maybe_compact`` logged: a conversation compaction gave up on."""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_conversation(
    history: RedisHistory, written: dict[int, list[str]], capped_away: int, check: Check
) -> None:
    """Every acknowledged id in the transcript once and in its pod's order; the missing ones,
    if any, the oldest, no more than the archive's cap dropped."""
    name = history.conversation_id
    transcript = [m.id for m in history.transcript()]
    seen = set(transcript)
    check.in_transcripts += len(transcript)
    if len(seen) != len(transcript):
        check.duplicated += len(transcript) - len(seen)
        check.problems.append(f"{name}: {len(transcript) - len(seen)} messages twice")
    acknowledged: set[str] = set()
    missing_here = 0
    for pod, ids in written.items():
        check.acknowledged += len(ids)
        acknowledged.update(ids)
        kept = [i for i in ids if i in seen]
        missing = len(ids) - len(kept)
        if kept != ids[missing:]:
            check.lost += missing
            check.problems.append(f"{name}: pod {pod} lost {missing} messages, not the oldest")
        missing_here += missing
        own = set(ids)
        if [i for i in transcript if i in own] != kept:
            check.out_of_order += 1
            check.problems.append(f"{name}: pod {pod}'s messages are out of order")
    if missing_here > capped_away:
        check.lost += missing_here - capped_away
        check.problems.append(
            f"{name}: {missing_here} messages missing, the archive's cap dropped {capped_away}"
        )
    else:
        check.capped += missing_here
    check.unacknowledged += len(seen - acknowledged)


def keys_without_ttl(client: redis.Redis, pattern: str) -> int:
    """How many keys matching ``pattern`` never expire."""
    keys = list(client.scan_iter(match=pattern, count=1000))
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.ttl(key)
        return sum(ttl == -1 for ttl in pipe.execute())


def read_records(plans: Sequence[PodPlan], check: Check) -> dict[str, dict[int, list[str]]]:
    """What each pod acknowledged, by conversation and pod; a problem for a pod that died or
    failed."""
    by_conversation: dict[str, dict[int, list[str]]] = {}
    for plan in plans:
        if not plan.record.exists():
            check.problems.append(f"pod {plan.pod} left no record of what it wrote")
            continue
        record = json.loads(plan.record.read_text())
        if record["error"]:
            check.problems.append(f"pod {plan.pod} failed: {record['error']}")
        check.warnings += record["warnings"]
        for conversation, ids in record["written"].items():
            by_conversation.setdefault(conversation, {})[plan.pod] = ids
    return by_conversation


@dataclass
class ModeResult:
    """One mode's rows, its last row after the drain, and its check."""

    mode: str
    rows: list[Row] = field(default_factory=list)
    final: Row | None = None
    check: Check = field(default_factory=Check)
    drained: bool = True


def run_mode(mode: str, args: argparse.Namespace, info: dict[str, str]) -> ModeResult:
    """Pods writing and workers compacting on a server of their own for ``args.seconds``;
    ``info`` gets the versions the figures depend on."""
    result = ModeResult(mode)
    names = [f"{mode}-{i:04d}" for i in range(args.conversations)]
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        client = server.client()
        info |= {k: v for k, v in versions(client).items() if k not in info}
        queue = compaction_queue(client, name=QUEUE)
        histories = [RedisHistory(client, name, namespace=NAMESPACE) for name in names]
        plans = [
            PodPlan(
                mode,
                server.url,
                pod,
                tuple(names[pod :: args.pods]),
                args.llm_latency,
                Path(tmp) / f"pod-{pod}.json",
            )
            for pod in range(min(args.pods, len(names)))
        ]
        print(
            f"\n{mode}: {len(plans)} pods on {len(names)} conversations, {args.workers} "
            f"workers, {args.seconds:g} s",
            flush=True,
        )
        print(text_line([title for title, _, _ in COLUMNS]), flush=True)
        workers = Workers(server.url, args.workers, Path(tmp))
        try:
            workers.wait_ready(queue)
            pods = Pods.launch(plans)
            began = time.monotonic()
            try:
                pods.wait_ready()
                began = time.monotonic()
                pods.start.set()
                end = began + args.seconds
                while (now := time.monotonic()) < end:
                    tick = min(now + args.sample, end)
                    turns, timings = pods.collect(tick)
                    elapsed = time.monotonic() - began
                    row = sample(client, histories, elapsed, turns / (tick - now), timings)
                    result.rows.append(row)
                    print(text_line(cells(row)), flush=True)
            finally:
                pods.stop()
            result.drained = workers.drain(queue)
            result.check.failed_jobs = queue.failed_job_registry.count
        finally:
            workers.stop()
        result.check.outcomes = workers.outcomes()
        result.final = sample(client, histories, time.monotonic() - began, None, [])
        print(text_line(["end", *cells(result.final)[1:]]), flush=True)
        verify(result, plans, histories, client)
        client.close()
    return result


def verify(
    result: ModeResult,
    plans: Sequence[PodPlan],
    histories: Sequence[RedisHistory],
    client: redis.Redis,
) -> None:
    """Check every conversation's transcript, and that the queue drained with no failure."""
    check = result.check
    if not result.drained:
        check.problems.append("the workers did not drain the queue")
    if check.failed_jobs:
        check.problems.append(f"{check.failed_jobs} compaction jobs failed")
    check.rq_keys_without_ttl = keys_without_ttl(client, "rq:*")
    written = read_records(plans, check)
    for history in histories:
        capped_away = int(client.hget(history.keys.meta, "adropped") or 0)
        check_conversation(history, written.get(history.conversation_id, {}), capped_away, check)
    jobs = ", ".join(f"{n} {outcome}" for outcome, n in sorted(check.outcomes.items()))
    print(
        f"{check.acknowledged:,} messages acknowledged: {check.in_transcripts:,} in the "
        f"transcripts, {check.capped:,} dropped by the archive's cap, {check.lost} lost, "
        f"{check.duplicated} twice, {check.out_of_order} conversations out of order; "
        f"{check.failed_jobs} jobs failed; jobs: {jobs or 'none'}; "
        f"{check.rq_keys_without_ttl} RQ keys without a TTL; {check.warnings} "
        "warnings of a conversation compaction gave up on",
        flush=True,
    )
    for problem in check.problems[:20]:
        print(f"PROBLEM: {problem}", flush=True)
    if check.ok:
        print("nothing lost", flush=True)


def markdown(results: Sequence[ModeResult], info: dict[str, str], args: argparse.Namespace) -> str:
    """Each mode's rows and its check, as Markdown."""
    lines = [
        f"Python {info['python']}, redis-py {info['redis-py']}, rq {info['rq']}, "
        f"redis-server {info['redis-server']}, {info['nproc']} CPUs; {args.pods} pods, "
        f"{args.workers} workers, {args.conversations} conversations, {args.seconds:g} s, "
        f"model latency {args.llm_latency:g} s; load average {info['load_before']} before, "
        f"{info['load_after']} after.",
    ]
    for r in results:
        lines += [
            "",
            f"| {r.mode} | " + " | ".join(title for title, _, _ in COLUMNS[1:]) + " |",
            "|---" + "|---:" * (len(COLUMNS) - 1) + "|",
        ]
        lines += [f"| {' | '.join(cells(row))} |" for row in r.rows]
        if r.final is not None:
            lines.append(f"| end (drained) | {' | '.join(cells(r.final)[1:])} |")
        c = r.check
        lines += [
            "",
            f"{c.acknowledged:,} messages acknowledged, {c.capped:,} of them dropped by the "
            f"archive's cap, {c.lost} lost, {c.duplicated} twice, {c.out_of_order} out of order; "
            f"{c.failed_jobs} failed jobs; {c.rq_keys_without_ttl} RQ keys without a TTL; jobs: "
            + ", ".join(f"{n:,} {o}" for o, n in sorted(c.outcomes.items()))
            + f"; {c.warnings} warnings of a conversation compaction gave up on.",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--sample", type=float, default=30, help="seconds between rows")
    parser.add_argument(
        "--llm-latency", type=float, default=0.02, help="seconds each turn waits for its model"
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: does it run")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.pods, args.workers, args.seconds = 2, 1, 4.0
        args.conversations, args.sample = 6, 2.0
    modes = list(MODES) if args.mode == "both" else [args.mode]
    info = {"load_before": load()}
    results = [run_mode(mode, args, info) for mode in modes]
    info["load_after"] = load()
    if args.markdown:
        print()
        print(markdown(results, info, args))
    if args.json:
        payload = {
            "versions": info,
            "args": {k: v for k, v in vars(args).items() if k not in {"json", "markdown"}},
            "results": [
                {
                    "mode": r.mode,
                    "rows": [asdict(row) for row in r.rows],
                    "final": asdict(r.final) if r.final else None,
                    "check": {**asdict(r.check), "ok": r.check.ok},
                }
                for r in results
            ],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 0 if all(r.check.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
