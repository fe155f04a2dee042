"""Summarizers and an extractor that real worker processes load by dotted path in the tests,
and the in-process worker the tests run jobs with.

They report to the test through the store's Redis (``REDIS_HISTORY_URL``), on
keys outside the library's ``rh:`` prefix; when the worker reaches the store through a
fault proxy, they report to the server behind it (``TEST_DOUBLES_URL``), so the faults
hit the worker and not the test's bookkeeping. Each test message carries the name
of its conversation in ``metadata["conversation"]``, which is how a summarizer
(given only messages) knows which conversation it is compacting.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

import redis
from rq.timeouts import TimerDeathPenalty

from redis_history import Message
from redis_history.compaction.jobs import SimpleCompactionWorker
from redis_history.compaction_policy import CompactionContext
from redis_history.memory.extraction import Fact, RuleExtractor

RELEASE_TIMEOUT = 120
"""How long a blocked summarizer waits for the test before it gives up on its own."""

T = TypeVar("T")


def _client() -> redis.Redis:
    # redis-py 8 reads with a 5 s timeout by default; a blocked summarizer waits longer.
    url = os.environ.get("TEST_DOUBLES_URL") or os.environ["REDIS_HISTORY_URL"]
    return redis.Redis.from_url(url, socket_timeout=None)


def conversation_of(messages: Sequence[Message]) -> str:
    """The conversation a test message belongs to."""
    for message in messages:
        name = message.metadata.get("conversation")
        if isinstance(name, str):
            return name
    raise ValueError("no test message names its conversation")


def _text(messages: Sequence[Message], note: str) -> str:
    users = [m.content for m in messages if m.role == "user"]
    return f"Previously ({note}): {len(messages)} messages, {len(users)} questions."


class Recording:
    """Counts compactions in flight per conversation; any count above one is an overlap."""

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """Mark the compaction in flight for a moment, recording an overlap if there is one."""
        name = conversation_of(messages)
        client = _client()
        try:
            in_flight = client.incr(f"test:inflight:{name}")
            if in_flight > 1:
                client.rpush("test:overlaps", f"{name} had {in_flight} compactions at once")
            client.rpush("test:summaries", json.dumps({"conversation": name, "pid": os.getpid()}))
            time.sleep(0.02)  # widen the window in which a second compaction would show
            client.decr(f"test:inflight:{name}")
        finally:
            client.close()
        return _text(messages, "recorded")


class Blocking:
    """The first call per conversation announces itself, then waits for the test's release.

    The test may SIGSTOP, SIGKILL or release the process meanwhile. Later calls
    answer at once; every call is recorded with the ids it was given.
    """

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """Record the call; block on the first until ``test:release:<conversation>``."""
        name = conversation_of(messages)
        client = _client()
        try:
            client.sadd("test:horses", os.getpid())  # RQ runs jobs in their own session
            call = client.incr(f"test:calls:{name}")
            record = {"pid": os.getpid(), "call": call, "ids": [m.id for m in messages]}
            client.rpush(f"test:started:{name}", json.dumps(record))
            if call == 1 and not client.blpop([f"test:release:{name}"], RELEASE_TIMEOUT):
                raise TimeoutError("the test never released the blocked summarizer")
        finally:
            client.close()
        return _text(messages, f"call {call}")


def _steadily(call: Callable[[], T]) -> T:
    """``call()``, retried through outages of the store until RELEASE_TIMEOUT runs out.

    Only idempotent calls go through here: one whose reply was lost may have been applied.
    """
    end = time.monotonic() + RELEASE_TIMEOUT
    while True:
        try:
            return call()
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() > end:
                raise
            time.sleep(0.02)


class Steady:
    """Blocking's first-call-waits and Recording's in-flight count, through store outages.

    Every Redis call is idempotent and retried, so killed connections or a paused
    store during the summary fail neither the summary nor the bookkeeping: what
    the test sees is the worker's behaviour, not the double's. The first call per
    conversation waits until ``test:release:<conversation>`` exists; each call is
    announced on ``test:started:<conversation>`` (possibly twice, same ``token``).
    """

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        """Mark the compaction in flight, announce it, wait if first, and unmark it."""
        name = conversation_of(messages)
        token = uuid.uuid4().hex
        client = _client()
        try:
            _steadily(lambda: client.sadd("test:horses", os.getpid()))
            _steadily(lambda: client.sadd(f"test:inflight:{name}", token))
            in_flight = _steadily(lambda: client.scard(f"test:inflight:{name}"))
            if in_flight > 1:
                note = f"{name} had {in_flight} compactions at once"
                _steadily(lambda: client.sadd("test:overlaps", note))
            _steadily(lambda: client.set(f"test:first:{name}", token, nx=True))
            first = _steadily(lambda: client.get(f"test:first:{name}")) == token.encode()
            record = {"pid": os.getpid(), "token": token, "first": first}
            _steadily(lambda: client.rpush(f"test:started:{name}", json.dumps(record)))
            end = time.monotonic() + RELEASE_TIMEOUT
            while first and not _steadily(lambda: client.exists(f"test:release:{name}")):
                if time.monotonic() > end:
                    raise TimeoutError("the test never released the steady summarizer")
                time.sleep(0.02)
            _steadily(lambda: client.srem(f"test:inflight:{name}", token))
        finally:
            client.close()
        return _text(messages, "steady" + (" first" if first else ""))


class InProcessWorker(SimpleCompactionWorker):
    """The allowlisting worker run in the test's process, timing jobs with a thread so
    pytest-timeout keeps SIGALRM."""

    death_penalty_class = TimerDeathPenalty


class BlockingExtractor:
    """The offline rules, recording each message it is handed (``test:extracted``); its first
    call in the whole test announces its process (``test:extract-started``) and then waits
    for a release the test never sends: the test kills it there."""

    name = "blocking"

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        client = _client()
        try:
            client.sadd("test:horses", os.getpid())
            client.rpush("test:extracted", *[m.id for m in messages])
            if client.incr("test:extract-calls") == 1:
                client.rpush("test:extract-started", os.getpid())
                client.blpop(["test:extract-release"], RELEASE_TIMEOUT)
                raise TimeoutError("the test never killed the blocked extractor")
        finally:
            client.close()
        return RuleExtractor().extract(messages)
