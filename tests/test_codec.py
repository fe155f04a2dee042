"""Envelopes: long lists decode with the GC paused and always leave the GC as they found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from redis_history import CorruptHistoryError, Message
from redis_history.store.codec import GC_PAUSE_MIN, decode_entries, encode_message
from redis_history.tokens import HeuristicCounter

ENVELOPES = [
    encode_message(Message.user(f"m{i}"), HeuristicCounter(), 1 << 20)[0]
    for i in range(GC_PAUSE_MIN)
]


@pytest.fixture
def gc_enabled() -> Iterator[None]:
    """Whatever a test does to the GC, it is enabled again afterwards."""
    yield
    gc.enable()


def test_a_long_list_is_decoded_with_the_gc_paused(
    monkeypatch: pytest.MonkeyPatch, gc_enabled: None
) -> None:
    """The GC is off while a long list validates, and on again after, even on corrupt data."""
    seen: list[bool] = []
    real = gc.disable

    def disable() -> None:
        seen.append(True)
        real()

    monkeypatch.setattr(gc, "disable", disable)
    assert len(decode_entries(ENVELOPES)) == GC_PAUSE_MIN
    assert seen == [True]
    assert gc.isenabled()
    with pytest.raises(CorruptHistoryError):
        decode_entries([*ENVELOPES, b'{"t":1}'])
    assert gc.isenabled()
    decode_entries(ENVELOPES[:3])
    assert len(seen) == 2, "short lists leave the GC alone"


def test_a_callers_disabled_gc_stays_disabled(gc_enabled: None) -> None:
    """A caller that turned the GC off finds it still off."""
    gc.disable()
    decode_entries(ENVELOPES)
    assert not gc.isenabled()
