"""The full record read a page at a time, and the archive kept within its caps.

Run against every backend (see ``backends.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from samples import turns

from redis_history import Message


def compact(history: Any, keep: int) -> int:
    """Splice everything but the last ``keep`` messages into one summary, fenced on their ids."""
    prefix = history.snapshot()[:-keep]
    return int(
        history.splice_prefix(
            len(prefix), Message.system("summary"), expected_ids=[m.id for m in prefix]
        )
    )


def test_pages_read_the_same_record_as_transcript(history: Any) -> None:
    """Paging through the record with page.next gives transcript(), in order."""
    history.append_many(turns(6))
    compact(history, 8)
    history.append_many(turns(2)[1:])
    paged: list[Message] = []
    start: int | None = 0
    while start is not None:
        page = history.transcript_page(start, 4)
        paged += page.messages
        start = page.next
    assert paged == history.transcript()
    assert list(history.iter_transcript(page_size=3)) == history.transcript()


def test_paging_while_compaction_moves_messages_skips_and_repeats_nothing(history: Any) -> None:
    """Compactions between two pages move live messages to the archive without shifting their
    positions; the summary's own position is taken care of by iter_transcript."""
    history.append_many(turns(8))
    expected_ids = [m.id for m in history.transcript()]
    reader = history.iter_transcript(page_size=5)
    seen = [next(reader).id for _ in range(12)]
    compact(history, 12)
    seen += [next(reader).id for _ in range(6)]
    compact(history, 4)
    seen += [m.id for m in reader]
    assert seen == expected_ids


def test_the_archive_keeps_at_most_its_cap_in_entries(history: Any) -> None:
    """Beyond archive_max_messages the oldest archived entries are dropped, oldest first."""
    history.append_many(turns(6))
    everything = history.transcript()
    prefix = history.snapshot()[:13]
    history.splice_prefix(13, Message.system("s1"), archive_max_messages=5)
    assert history.transcript() == everything[8:]
    page = history.transcript_page(0, 3)
    assert page.start == 8
    assert page.messages == everything[8:11]
    assert [m.id for m in prefix[8:]] == [m.id for m in everything[8:13]]


def test_the_archive_keeps_at_most_its_cap_in_bytes(history: Any) -> None:
    """Beyond archive_max_bytes the oldest archived entries are dropped until it fits."""
    history.append(Message.system("s"))
    for i in range(6):
        history.append_many([Message.user("x" * 1000 + str(i)), Message.assistant(f"a{i}")])
    prefix = history.snapshot()[:11]
    history.splice_prefix(11, Message.system("summary"), archive_max_bytes=2500)
    archived = [m for m in history.transcript() if m.id in {p.id for p in prefix}]
    assert [m.id for m in archived] == [m.id for m in prefix[-len(archived) :]]
    assert 0 < len(archived) < 11
    assert sum(len(m.content) for m in archived) < 2500


def test_archive_caps_and_pages_refuse_nonsense(history: Any) -> None:
    """Caps must be positive; a page needs start >= 0 and count > 0."""
    history.append_many(turns(1))
    with pytest.raises(ValueError, match="positive"):
        history.splice_prefix(1, Message.system("s"), archive_max_messages=0)
    with pytest.raises(ValueError, match="start must be >= 0"):
        history.transcript_page(-1, 5)
    with pytest.raises(ValueError, match="count must be positive"):
        history.transcript_page(0, 0)


def test_a_replace_keeps_the_summaries_it_keeps(history: Any) -> None:
    """A replace with the unchanged snapshot (or one keeping the summary) keeps it marked:
    the transcript goes on listing the originals it replaced, not the summary."""
    history.append_many(turns(2))
    history.splice_prefix(5, Message.system("Summary: q0"))
    snapshot = history.snapshot()
    record = history.transcript()
    history.replace(snapshot, expected_ids=[m.id for m in snapshot])
    assert [e.summary for e in history.entries()] == [True, False, False, False, False]
    assert history.transcript() == record
    history.replace([snapshot[0], Message.user("edited")])
    assert [e.summary for e in history.entries()] == [True, False]
    assert history.transcript()[-1].content == "edited"
