"""Importing the library loads no tokenizer, no RQ and no HTTP client: each waits for its use.

A pod should not pay for what it does not use: tiktoken loads when an exact counter is first
built (a history's appends price with the estimate and never build one; requests are priced
exactly by default, so the first ``fit_to_budget`` or ``HistoryManager`` does), ``urllib.request``
(with ``http.client``) when the OpenAI-compatible summarizer sends its first request, RQ
only in the worker's jobs module, OpenTelemetry's API at the first call a pod records.
``ssl`` is not loaded by the library either; redis-py loads it (through asyncio), so it is
checked against what the dependencies load alone (redis-py 8 loads OpenTelemetry too, when
it is installed).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LAZY = ("http.client", "opentelemetry", "rq", "ssl", "tiktoken", "urllib.request")
"""What importing the library must not load."""

ENTRY_POINTS = ("redis_history", "redis_history.context", "redis_history.store.history")

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""

SUMMARIZE = """
import json, socket, sys
from redis_history import Message, OpenAICompatibleSummarizer, SummarizerError

before = set(sys.modules)
closed = socket.socket()  # bound, never listening: the connection is refused at once
closed.bind(("127.0.0.1", 0))
port = closed.getsockname()[1]
summarizer = OpenAICompatibleSummarizer(
    base_url=f"http://127.0.0.1:{port}/v1", api_key="", max_retries=0, timeout=5
)
try:
    summarizer.summarize([Message.user("hi")])
except SummarizerError:
    pass
print(json.dumps(sorted(set(sys.modules) - before)))
"""

COUNT = """
import json, sys
from redis_history import TiktokenCounter

before = set(sys.modules)
assert TiktokenCounter().count("hello world") == 2
print(json.dumps(sorted(set(sys.modules) - before)))
"""

FIT = """
import json, sys
from redis_history import Message
from redis_history.context import fit_to_budget

message = Message.user("hello world")
before = set(sys.modules)
assert fit_to_budget([message], 100) == [message]
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def loaded(*modules: str) -> set[str]:
    """The modules a fresh interpreter holds after importing ``modules``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout))


def run(script: str) -> set[str]:
    """The names ``script`` prints (a JSON list) in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_importing_the_library_loads_no_tokenizer_rq_or_http_client(module: str) -> None:
    """``module`` imports without tiktoken, rq, ``http.client``, ``urllib.request`` or
    ``ssl``, but what redis-py and pydantic load by themselves (redis-py loads ``ssl``)."""
    dependencies = loaded("redis", "redis.asyncio", "pydantic", "orjson")
    unwanted = {name for name in LAZY if name not in dependencies}
    assert unwanted >= {"http.client", "rq", "tiktoken", "urllib.request"}
    assert loaded(module) & unwanted == set()


def test_the_first_exact_count_loads_tiktoken() -> None:
    """The probe above would see tiktoken: counting with a TiktokenCounter loads it."""
    assert "tiktoken" in run(COUNT)


def test_the_first_request_fitted_with_the_default_counter_loads_tiktoken() -> None:
    """Requests are priced exactly by default: the first ``fit_to_budget`` without a counter
    loads tiktoken, which importing the library did not."""
    assert "tiktoken" in run(FIT)


def test_the_first_summary_request_loads_the_http_client() -> None:
    """The probe above would see the HTTP client: the OpenAI-compatible summarizer's first
    request loads ``urllib.request`` and ``http.client``."""
    assert {"http.client", "urllib.request"} <= run(SUMMARIZE)


def test_the_worker_jobs_load_rq() -> None:
    """The probe above would see RQ: the worker's jobs module loads it."""
    assert "rq" in loaded("redis_history", "redis_history.compaction.jobs")
