"""A compaction worker rides out outages of its queue's Redis, in process, on fakeredis.

The queue's fake server is disconnected (``FakeServer.connected = False``) from
inside a job, so the outage spans RQ's bookkeeping after it; the worker's pause
between attempts is where the test ends the outage, or asks the worker to stop.
The same faults on real servers and real worker processes are in
tests/test_worker_faults.py.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator, Sequence

import fakeredis
import pytest
import redis
from redis.exceptions import AuthenticationError, ResponseError
from rq.timeouts import TimerDeathPenalty
from rq.utils import now
from rq.worker import WorkerStatus
from samples import turns

from redis_history import Message, RedisHistory
from redis_history.compaction.jobs import (
    CompactionQueue,
    SimpleCompactionWorker,
    WorkerSettings,
    compaction_queue,
    configure_worker,
)
from redis_history.compaction.metrics import WorkerMetrics
from redis_history.compaction_policy import CompactionContext, CompactionPolicy

POLICY = CompactionPolicy(
    soft_tokens=50, hard_tokens=10_000, keep_last_turns=1, min_messages=2, cooldown_turns=0
)
pytestmark = pytest.mark.usefixtures("signal_handlers")

QUEUE_SERVER: list[fakeredis.FakeServer] = []
"""The queue's server while a test runs, for :class:`CutsTheQueue` to disconnect."""


class CutsTheQueue:
    """Summarizes, and takes the queue's Redis down as it returns (only on the first call)."""

    calls = 0

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """A summary; the first call leaves the queue unreachable."""
        CutsTheQueue.calls += 1
        if CutsTheQueue.calls == 1:
            QUEUE_SERVER[0].connected = False
        return "Previously: summarized while the queue went down"


class Worker(SimpleCompactionWorker):
    """The in-process worker, timing jobs by thread; its pauses call ``on_pause`` instead."""

    death_penalty_class = TimerDeathPenalty
    listener_retry_delay = 0.0

    def __init__(self, *args: object, on_pause: Callable[[Worker], None], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.pauses: list[float] = []
        self.on_pause = on_pause

    def _sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.on_pause(self)


@pytest.fixture
def queue_server() -> Iterator[fakeredis.FakeServer]:
    """The queue's own fake server, as in a deployment with a separate queue."""
    server = fakeredis.FakeServer()
    QUEUE_SERVER[:] = [server]
    CutsTheQueue.calls = 0
    yield server
    QUEUE_SERVER.clear()


@pytest.fixture
def queue(queue_server: fakeredis.FakeServer) -> CompactionQueue:
    """The JSON compaction queue on that server."""
    return compaction_queue(fakeredis.FakeRedis(server=queue_server), "compaction")


@pytest.fixture
def store() -> Iterator[fakeredis.FakeRedis]:
    """The history store, which stays up; jobs summarize with :class:`CutsTheQueue`."""
    client = fakeredis.FakeRedis()
    summarizer = f"{__name__}:CutsTheQueue"
    configure_worker(WorkerSettings(summarizer=summarizer, token_counter="heuristic"), store=client)
    yield client
    configure_worker(None)


@pytest.fixture
def outages() -> Iterator[list[str]]:
    """The jobs module's log lines (its logger may not propagate to caplog)."""
    records: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("redis_history.compaction.jobs")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield records
    log.removeHandler(handler)
    log.setLevel(level)


def due(store: fakeredis.FakeRedis, queue: CompactionQueue, name: str) -> RedisHistory:
    """A conversation long enough to compact, its job enqueued."""
    history = RedisHistory(store, name, token_counter="heuristic")
    history.append_many(turns(6))
    assert history.maybe_compact(queue, POLICY)
    return history


def compacted(history: RedisHistory) -> bool:
    """Whether the conversation now starts with a summary."""
    return bool(history.snapshot()[0].metadata.get("summary"))


def reconnect_after(pauses: int) -> Callable[[Worker], None]:
    """An ``on_pause`` that brings the queue back on every ``pauses``-th pause of the worker."""

    def on_pause(worker: Worker) -> None:
        if len(worker.pauses) % pauses == 0:
            QUEUE_SERVER[0].connected = True

    return on_pause


def test_an_outage_across_the_end_of_a_job_does_not_end_the_worker(
    store: fakeredis.FakeRedis,
    queue: CompactionQueue,
    queue_server: fakeredis.FakeServer,
    outages: list[str],
) -> None:
    """The queue goes down as a job finishes: RQ cannot record it, the worker waits the
    outage out (logged once each way) and serves the next job."""
    first, second = due(store, queue, "first"), due(store, queue, "second")
    worker = Worker([queue], connection=queue.connection, on_pause=reconnect_after(2))
    assert worker.work(burst=True)
    assert compacted(first), "the first job's write-back went to the store, which stayed up"
    assert compacted(second), "the worker went on to the next job"
    assert worker.pauses == [0.5, 1.0]
    assert sum("unavailable" in w for w in outages) == 1
    assert sum("is back after" in w for w in outages) == 1
    assert any("RQ could not record job" in w for w in outages)


def test_a_stop_request_during_an_outage_ends_the_worker_cleanly(
    store: fakeredis.FakeRedis,
    queue: CompactionQueue,
    queue_server: fakeredis.FakeServer,
    outages: list[str],
) -> None:
    """SIGTERM while the worker waits for its Redis: a warm shutdown, though RQ cannot
    register the worker's death (its key expires)."""
    history = due(store, queue, "first")

    def stop(worker: Worker) -> None:
        worker.request_stop(signal.SIGTERM, None)  # type: ignore[no-untyped-call]

    worker = Worker([queue], connection=queue.connection, on_pause=stop)
    worker.work(burst=False)  # returns, where RQ alone raised from its teardown
    assert compacted(history)
    assert worker.pauses == [0.5]
    assert queue_server.connected is False, "the outage never ended"
    assert worker.pubsub_thread is not None
    assert not worker.pubsub_thread.is_alive(), "the command listener was stopped"


def test_the_idle_wait_backs_off_to_a_bound(
    queue: CompactionQueue, queue_server: fakeredis.FakeServer, outages: list[str]
) -> None:
    """An idle worker's heartbeat waits for its Redis, doubling the pause up to five seconds."""
    worker = Worker([queue], connection=queue.connection, on_pause=reconnect_after(7))
    worker.set_state(WorkerStatus.IDLE)
    queue_server.connected = False
    worker.heartbeat()
    assert worker.pauses == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert len(outages) == 2, "one line when it starts, one when it ends"
    assert "unavailable" in outages[0]
    assert "is back after" in outages[1]
    queue_server.connected = False
    worker.heartbeat()
    assert worker.pauses[7:] == worker.pauses[:7], "the next outage starts over"


def test_each_heartbeat_that_fails_is_counted(
    queue: CompactionQueue, queue_server: fakeredis.FakeServer
) -> None:
    """Every heartbeat the unreachable queue did not take adds one to the worker's metric."""
    worker = Worker([queue], connection=queue.connection, on_pause=reconnect_after(3))
    worker.metrics = WorkerMetrics(queue.name, lambda: (0, 0))
    worker.set_state(WorkerStatus.IDLE)
    queue_server.connected = False
    worker.heartbeat()
    failures = worker.metrics.registry.get_sample_value("redis_history_heartbeat_failures_total")
    assert failures == 3


def hooks(worker: Worker, queue: CompactionQueue) -> dict[str, Callable[[], object]]:
    """Every RQ hook the worker overrides to ride out outages, ready to call."""
    job = queue.enqueue("redis_history.compaction.jobs.compact_conversation", "ns", "c", "rh", {})
    execution = worker.prepare_execution(job)
    worker._shutdown_requested_date = now()
    return {
        "heartbeat while busy": worker.heartbeat,
        "set_state": lambda: worker.set_state(WorkerStatus.IDLE),
        "maintain_heartbeats": lambda: worker.maintain_heartbeats(job, execution),
        "check_for_suspension": lambda: worker.check_for_suspension(burst=False),
        "run_maintenance_tasks": worker.run_maintenance_tasks,
        "execute_job": lambda: worker.execute_job(job, queue),
        "set_shutdown_requested_date": worker.set_shutdown_requested_date,
        "register_death": worker.register_death,
    }


def test_every_hook_rides_out_an_outage(
    queue: CompactionQueue, queue_server: fakeredis.FakeServer, outages: list[str]
) -> None:
    """With the queue unreachable, no hook raises, a busy worker never pauses, and the
    outage is logged once."""
    worker = Worker([queue], connection=queue.connection, on_pause=reconnect_after(1))
    calls = hooks(worker, queue)
    queue_server.connected = False
    for name, call in calls.items():
        worker._state = WorkerStatus.BUSY  # as while a horse works
        call()  # raises nothing
        assert worker.pauses == [], name
    assert sum("unavailable" in w for w in outages) == 1, outages
    assert worker.executions == {}, "no stale execution is left for the next job's horse"


def handled(worker: Worker, error: Exception) -> None:
    """Hand ``error`` to the command listener thread's handler the way redis-py's thread does."""
    thread = worker.pubsub_thread
    assert thread is not None
    try:
        raise error
    except type(error):
        thread.exception_handler(error, worker.pubsub, thread)


def test_the_command_listener_survives_outages_and_timeouts(queue: CompactionQueue) -> None:
    """RQ's pubsub thread reconnects after a connection error or a timeout (RQ alone let a
    timeout end it); anything else still ends it."""
    worker = Worker([queue], connection=queue.connection, on_pause=reconnect_after(1))
    worker.subscribe()
    try:
        handled(worker, redis.ConnectionError("reset"))
        handled(worker, redis.TimeoutError("stalled"))
        handled(worker, AuthenticationError("invalid password"))  # tried again, as in RQ
        with pytest.raises(ResponseError):
            handled(worker, ResponseError("NOPERM"))
    finally:
        worker.unsubscribe()


@pytest.mark.parametrize(
    "error",
    [AuthenticationError("invalid password"), ResponseError("NOPERM")],
    ids=["wrong-credentials", "refused-command"],
)
def test_errors_that_are_no_outage_still_end_the_worker(
    queue: CompactionQueue, error: redis.RedisError, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wrong credentials or a refused command are not waited out: they reach RQ's loop."""
    worker = Worker([queue], connection=queue.connection, on_pause=reconnect_after(1))

    def refuse(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(worker.connection, "hset", refuse)
    monkeypatch.setattr(worker, "clean_registries", refuse)
    for call in (lambda: worker.set_state(WorkerStatus.IDLE), worker.run_maintenance_tasks):
        with pytest.raises(type(error)):
            call()  # type: ignore[no-untyped-call]
