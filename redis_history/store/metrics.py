"""A pod's own counters, through OpenTelemetry's metrics API: a no-op unless the application
configures a meter provider.

The library never configures one, as OpenTelemetry asks of libraries: an application
that calls ``opentelemetry.metrics.set_meter_provider`` (before or after it makes its
histories) gets these instruments of the meter ``redis_history``; one that does not pays
a call into OpenTelemetry's proxy instruments, which drop it (``docs/benchmarks.md``
measures it). ``opentelemetry-api`` is optional (the ``otel`` extra): without it
nothing is recorded. It is imported at the first call recorded, not with the package.

The front ends in ``store/history.py`` record here; the sans-IO core reads no clock.
"""

from __future__ import annotations

import time
from typing import Any

from redis_history.errors import HistoryError

__all__ = [
    "METER",
    "appended",
    "compaction_enqueued",
    "refused",
    "snapshot_read",
    "written",
]

METER = "redis_history"
"""The name of the meter every instrument belongs to."""

clock = time.perf_counter
"""The clock the front ends time their calls with."""


class _Instruments:
    """The instruments of the ``redis_history`` meter (proxies until a provider is set)."""

    def __init__(self, meter: Any) -> None:
        self.appends = meter.create_counter(
            "redis_history.appends", unit="{message}", description="Messages appended."
        )
        self.replays = meter.create_counter(
            "redis_history.append.replays",
            unit="{call}",
            description="Appends the store had applied before (a retry): nothing was written.",
        )
        self.refusals = meter.create_counter(
            "redis_history.append.refusals",
            unit="{call}",
            description="Appends refused or failed, by kind: the HistoryError raised.",
        )
        self.write_duration = meter.create_histogram(
            "redis_history.write.duration",
            unit="s",
            description="Wall time of a write of the conversation, by operation.",
        )
        self.snapshot_duration = meter.create_histogram(
            "redis_history.snapshot.duration",
            unit="s",
            description="Wall time of reading the live conversation.",
        )
        self.compactions_enqueued = meter.create_counter(
            "redis_history.compactions.enqueued",
            unit="{job}",
            description="Compactions this process scheduled with maybe_compact.",
        )


_state: list[_Instruments | None] = []
"""Empty until the first record; then the instruments, or ``None`` without the API."""
_OPERATIONS: dict[str, dict[str, str]] = {}
_KINDS: dict[type[BaseException], dict[str, str]] = {}


def _instruments() -> _Instruments | None:
    if not _state:
        try:
            from opentelemetry import metrics  # noqa: PLC0415  (optional, and not at import)
        except ImportError:
            _state.append(None)
        else:
            _state.append(_Instruments(metrics.get_meter(METER)))
    return _state[0]


def _operation(name: str) -> dict[str, str]:
    attributes = _OPERATIONS.get(name)
    if attributes is None:
        attributes = _OPERATIONS[name] = {"operation": name}
    return attributes


def appended(messages: int, seconds: float, replayed: bool | None) -> None:
    """An append of ``messages`` that took ``seconds``; a ``replayed`` one wrote nothing."""
    instruments = _state[0] if _state else _instruments()
    if instruments is not None:
        if replayed:
            instruments.replays.add(1)
        else:
            instruments.appends.add(messages)
        instruments.write_duration.record(seconds, _operation("append"))


def refused(exc: HistoryError) -> None:
    """An append that raised ``exc`` (bad input, or Redis refusing or unreachable)."""
    instruments = _state[0] if _state else _instruments()
    if instruments is not None:
        kind = _KINDS.get(type(exc))
        if kind is None:
            kind = _KINDS[type(exc)] = {"kind": type(exc).__name__}
        instruments.refusals.add(1, kind)


def written(operation: str, seconds: float) -> None:
    """A write other than an append (``replace``, ``truncate``, ...) that took ``seconds``."""
    instruments = _state[0] if _state else _instruments()
    if instruments is not None:
        instruments.write_duration.record(seconds, _operation(operation))


def snapshot_read(seconds: float) -> None:
    """A read of the live conversation that took ``seconds``."""
    instruments = _state[0] if _state else _instruments()
    if instruments is not None:
        instruments.snapshot_duration.record(seconds)


def compaction_enqueued() -> None:
    """A compaction ``maybe_compact`` scheduled."""
    instruments = _state[0] if _state else _instruments()
    if instruments is not None:
        instruments.compactions_enqueued.add(1)
