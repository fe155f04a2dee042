"""Reads of a list (the live messages, the archive) in pages, at one version.

A whole read (``snapshot``, ``entries``, ``turns``, an export) or a long range would be one
``LRANGE`` of any length, about 1 ms a MiB in Redis. Instead no command reads more than
:data:`PAGE_ENTRIES` entries (each at most ``MAX_MESSAGE_BYTES``, so at most 64 MiB, about
60 ms here):

1. One ``LRANGE`` of the first page. A list that ends inside it was read whole by that one
   atomic command: a conversation of fewer than ``PAGE_ENTRIES`` messages costs what one
   ``LRANGE`` did.
2. Otherwise, pipelined: the meta hash's ``version``, the list's length, the first
   :data:`FIRST_PAGES` pages, then the version again.
3. Past those, the pages left up to the end the length gave, then the version again, in
   one more round trip.

The read returns the range as it was when the length was read. Between two pages only an
append (which adds after them) or a rewrite (which bumps the ``version``: replace, splice,
truncate, rollback, an import over it) can change the list, so the pages are fenced as a
fork's reads are: the version must be the same when the length is read and after the last
page, each page must begin with the entry the one before ended with (pages overlap by one,
which catches a conversation deleted and written again, whose version starts over) and
hold every entry up to the range's end. A read that fails the fence is made again from the
length, :data:`READ_ATTEMPTS` times in all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "FIRST_PAGES",
    "LENGTHS",
    "PAGE_ENTRIES",
    "READ_ATTEMPTS",
    "Complete",
    "Listing",
    "PagesWanted",
    "Rest",
]

PAGE_ENTRIES = 64
"""The most entries one ``LRANGE`` of a read spans: at most 64 MiB of stored entries (an
entry is at most ``MAX_MESSAGE_BYTES``); 50-80 ms of Redis here (``SLOWLOG``)."""

FIRST_PAGES = 4
"""The pages a read asks for with the length (253 entries): a longer range takes one round
trip more for the rest, whatever its length."""

READ_ATTEMPTS = 5
"""How many times a read of a list that rewrites keep changing is made before it gives up."""


class Lengths(dict[str, int]):
    """The length each list had when this process last read it whole, by key: a hint of how
    many pages the next read asks for at once (:attr:`Listing.expected`), never relied on.
    Cleared whole once it holds :data:`HINTS` lists, so it stays small."""

    def remember(self, key: str, length: int) -> None:
        if len(self) >= HINTS:
            self.clear()
        self[key] = length


HINTS = 10_000
"""The most lists whose length :data:`LENGTHS` remembers (about 1 MB of keys)."""

LENGTHS = Lengths()


@dataclass(frozen=True, slots=True)
class Complete:
    """A read's entries, all in hand: parsed as they are."""

    envelopes: list[Any]


class PagesWanted(Exception):
    """Raised by the parse of a read's first round trip when the range goes on past it
    (``rest``), or when the fence failed and the read is made again (``rest`` is ``None``)."""

    def __init__(self, listing: Listing, rest: Rest | None) -> None:
        super().__init__("more pages to read" if rest else "the list changed: read again")
        self.listing = listing
        self.rest = rest


def _pages(first: int, last: int | None, count: int, *, overlap: bool) -> list[tuple[int, int]]:
    """Up to ``count`` pages of positions from ``first`` to ``last`` (to wherever ``count``
    pages reach when ``last`` is not known), each after the first beginning at the position
    the one before ended at; the first too begins one before ``first`` when ``overlap``."""
    pages: list[tuple[int, int]] = []
    start = first - 1 if overlap else first
    while len(pages) < count:
        stop = start + PAGE_ENTRIES - 1
        if last is not None and stop >= last:
            pages.append((start, last))
            break
        pages.append((start, stop))
        start = stop
    return pages


@dataclass(frozen=True, slots=True)
class Listing:
    """A read of ``key``'s entries from ``start`` to ``stop`` inclusive (``LRANGE``'s
    positions: negative ones count from the end)."""

    key: str
    meta: str
    start: int
    stop: int
    expected: int = 0
    """How long the list is expected to be (a hint: the length the last whole read of it
    found). At a page or more, the read starts with the fenced round trip and asks for the
    pages the hint names (:data:`FIRST_PAGES` at least), so that a long list is read in
    one round trip and no page twice."""

    def single(self) -> bool:
        """Whether one ``LRANGE`` reads the range: it spans at most a page whatever the
        list's length (both ends from the head, or both from the tail)."""
        same_side = (self.start >= 0) == (self.stop >= 0)
        return same_side and self.stop - self.start < PAGE_ENTRIES

    def first_page(self) -> tuple[Any, ...] | None:
        """The ``LRANGE`` of the first page, when the range starts from the head and the list
        is not expected to go past it."""
        if self.start < 0 or self.expected >= PAGE_ENTRIES:
            return None
        return ("LRANGE", self.key, self.start, self.start + PAGE_ENTRIES - 1)

    def page(self, reply: Any) -> list[Any]:
        """The entries, from the first page's reply (or a :class:`Complete`).

        Raises:
            PagesWanted: the range goes on past the page (``rest`` ``None``).
        """
        if isinstance(reply, Complete):
            return reply.envelopes
        if len(reply) == PAGE_ENTRIES:
            raise PagesWanted(self, None)
        if self.stop >= 0:
            return list(reply[: self.stop - self.start + 1])
        end = self.start + len(reply) + self.stop  # the last position, at that instant
        return list(reply[: max(0, end - self.start + 1)])

    def commands(self) -> tuple[tuple[Any, ...], ...]:
        """The fenced round trip: the version, the length, the first pages (when the range
        starts from the head), the version again."""
        version = ("HGET", self.meta, "version")
        ranges = tuple(("LRANGE", self.key, start, stop) for start, stop in self._first_pages())
        return (version, ("LLEN", self.key), *ranges, version)

    def _first_pages(self) -> list[tuple[int, int]]:
        if self.start < 0:
            return []  # positions from the tail: known once the length is
        last = self.stop if self.stop >= 0 else None
        # Past the expected length by a page, for appends since the hint.
        count = max(FIRST_PAGES, (self.expected - self.start) // (PAGE_ENTRIES - 1) + 2)
        return _pages(self.start, last, count, overlap=False)

    def read(self, reply: Any) -> list[Any]:
        """The entries, from the fenced round trip's replies (or a :class:`Complete`).

        Raises:
            PagesWanted: the range goes on past the first pages, or the fence failed.
        """
        if isinstance(reply, Complete):
            return reply.envelopes
        version, length, *pages = reply
        after = pages.pop()
        if pages and len(pages[0]) < PAGE_ENTRIES:
            # The list ended inside the first page: that LRANGE read it whole, atomically.
            page: list[Any] = pages[0]
            if self.stop >= 0:
                return page[: self.stop - self.start + 1]
            end = self.start + len(page) + self.stop  # the last position, at that instant
            return page[: max(0, end - self.start + 1)]
        first, last = self._bounds(int(length))
        if first > last:
            return []
        if after != version:
            raise PagesWanted(self, None)
        entries = _joined([], pages, self._first_pages(), last)
        if entries is None:
            raise PagesWanted(self, None)
        if first + len(entries) - 1 >= last:
            return entries[: last - first + 1]
        raise PagesWanted(self, Rest(self, version, first, last, entries))

    def _bounds(self, length: int) -> tuple[int, int]:
        """The range's first and last positions in a list of ``length`` entries."""
        first = self.start if self.start >= 0 else max(0, length + self.start)
        last = self.stop if self.stop >= 0 else length + self.stop
        return first, min(last, length - 1)


@dataclass(frozen=True, slots=True)
class Rest:
    """What the first round trip read of a range that goes on past it."""

    listing: Listing
    version: Any
    first: int
    last: int
    entries: list[Any]

    def asked(self) -> list[tuple[int, int]]:
        """The positions of the pages left (the first overlapping the entries held)."""
        after = self.first + len(self.entries)
        return _pages(after, self.last, self.last - after + 2, overlap=bool(self.entries))

    def commands(self) -> tuple[tuple[Any, ...], ...]:
        """The second round trip: every page left, then the version."""
        key = self.listing.key
        ranges = tuple(("LRANGE", key, start, stop) for start, stop in self.asked())
        return (*ranges, ("HGET", self.listing.meta, "version"))

    def joined(self, replies: list[Any]) -> list[Any]:
        """The range's entries, with the second round trip's replies.

        Raises:
            PagesWanted: the fence failed (``rest`` ``None``): read again from the start.
        """
        *pages, version = replies
        entries = None
        if version == self.version:
            entries = _joined(list(self.entries), pages, self.asked(), self.last)
        if entries is None:
            raise PagesWanted(self.listing, None)
        return entries[: self.last - self.first + 1]


def _joined(
    entries: list[Any], pages: list[Any], asked: list[tuple[int, int]], last: int
) -> list[Any] | None:
    """``entries`` followed by ``pages`` (read at positions ``asked``), each overlapping the
    entries before by one when they are not empty; ``None`` when one does not begin with
    the entry before it or ends before ``last`` or its page's end."""
    for page, (start, stop) in zip(pages, asked, strict=True):
        if start > last:
            break  # asked before the length was known: past the range
        if len(page) < min(stop, last) - start + 1:
            return None
        if entries:
            if page[0] != entries[-1]:
                return None
            entries.extend(page[1:])
        else:
            entries.extend(page)
    return entries
