"""The store's limits, and the checks of the arguments its calls take.

Every limit is enforced before anything is sent, with a ``TypeError``, a ``ValueError``
or :class:`~redis_history.errors.LimitExceededError`; what only the server can measure
(the bytes a rewrite reads from the stored list) is enforced by the script, which then
refuses having written nothing. They keep every script well under 250 ms: Redis copies
a list's entries into Lua at about 7 ms per MiB, so no script reads more than
:data:`MAX_READ_BYTES` plus one entry, or is sent more than :data:`MAX_BATCH_BYTES`.
``lua/includes/limits.lua`` holds the numbers the scripts need (a test keeps them equal).
"""

from __future__ import annotations

import math
import operator
from datetime import timedelta
from typing import Any

from redis_history.errors import LimitExceededError

__all__ = [
    "BLOB_MIN_BYTES",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_MESSAGES",
    "MAX_BLOB_BYTES",
    "MAX_CONVERSATION_BLOBS",
    "MAX_CONVERSATION_BLOB_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_OP_ID_LENGTH",
    "MAX_PAGE",
    "MAX_READ_BYTES",
    "MAX_REWRITE",
    "MAX_ROLLBACK",
    "MAX_SUMMARIES",
    "MAX_SUMMARIES_READ_BYTES",
    "MAX_SUMMARY_BYTES",
    "MAX_SUMMARY_CANDIDATES",
    "MAX_SUMMARY_MESSAGES",
    "MAX_TOKENS",
    "MAX_TOOL_CALLS",
    "MAX_TTL_SECONDS",
    "MAX_WRITE_BLOBS",
    "MAX_WRITE_BLOB_BYTES",
    "count",
    "limited",
    "op_id",
    "position",
    "ttl_ms",
]

MAX_MESSAGE_BYTES = 1 << 20
"""The largest ``max_message_bytes`` a history takes, its default: 1 MiB, about 250,000
tokens of English. A read never passes its budget by more than one such entry."""

MAX_BATCH_MESSAGES = 10_000
"""The most messages one write sends: an ``append_many``, a ``replace``, a splice's
summaries; and the most ids a ``replace`` may expect."""

MAX_BATCH_BYTES = 8 << 20
"""The most bytes of envelopes one write sends, counted as a reader gets them back: a text
stored compressed counts decompressed (``codec.read_size``), so a write of text that
compresses well stores no more text than this. The scripts count stored bytes, fewer."""

BLOB_MIN_BYTES = 1024
"""Inline data of a content part (an image's bytes) this large or larger is stored once per
conversation, outside the message list, the envelope holding its digest; smaller stays in
the envelope."""

MAX_BLOB_BYTES = 20 << 20
"""The largest inline data of one content part (OpenAI's limit for an image): 20 MiB."""

MAX_WRITE_BLOB_BYTES = 20 << 20
"""The most inline data one write sends to be stored outside the list (distinct data
counted once), and one read fetches: 20 MiB, one part at its largest. Such a script ran
25-40 ms here, up to 52 ms with both cores busy (a script copies its arguments, then
Redis copies them again into the hash, on fresh pages each)."""

MAX_CONVERSATION_BLOB_BYTES = 128 << 20
"""The most inline data one conversation keeps outside its list, each distinct piece still
named by an entry of the list or the archive once (read back ``MAX_WRITE_BLOB_BYTES`` a
call); a write past it is refused by the script with ``LimitExceededError``."""

MAX_WRITE_BLOBS = 2_048
"""The most distinct pieces of such data one write sends (10 KiB each on average at
``MAX_WRITE_BLOB_BYTES``): a script stores and counts each, about 9 µs of the server's CPU
apiece here."""

MAX_CONVERSATION_BLOBS = 4_096
"""The most distinct pieces of that data one conversation counts (32 KiB each on average at
``MAX_CONVERSATION_BLOB_BYTES``): a rewrite that drops the whole list (``replace``,
``truncate(0)``) reads every count, and a splice may move or drop them all, about 4-6 µs of
the server's CPU apiece here, so this bounds their work; a write past it is refused by the
script with ``LimitExceededError``."""

MAX_TOOL_CALLS = 1_024
"""The most tool calls one assistant message may request."""

MAX_REWRITE = 10_000
"""The most messages a ``splice_prefix`` or a ``truncate`` (other than to 0) removes."""

MAX_ROLLBACK = 1_000
"""The most messages a ``rollback`` names, and how far from the tail it looks for them."""

MAX_READ_BYTES = 8 << 20
"""The most bytes of stored envelopes a rewrite reads (the prefix a splice archives,
what a truncate removes, the tail a rollback searches, the list a fenced replace
compares); past that the script refuses (``LimitExceededError``). A transcript page ends
once past it too, counted as a reader gets the entries back (a text stored compressed
decompressed, ``codec.read_size``): the script ends it by stored bytes, and the client
sooner by what they decompress to, decompressing none after the entry that reaches it."""

MAX_PAGE = 1_000
"""The most entries a transcript page asks for (``transcript()`` reads pages this size)."""

MAX_SUMMARIES = 64
"""The most shared summaries a ``HistoryManager`` keeps per conversation
(``HistoryManagerConfig.max_summaries``, 32 by default); past it the oldest is dropped."""

MAX_SUMMARY_BYTES = 16 << 10
"""The most UTF-8 bytes of one shared summary."""

MAX_SUMMARY_MESSAGES = 1_000
"""The most messages one shared summary covers; more evicted at once are summarized over
the next turns, oldest first."""

MAX_SUMMARY_CANDIDATES = 10_000
"""The most evicted messages one ``on_turn_complete`` offers to summarize (the newest)."""

SUMMARY_COVER_BYTES = 1_095
"""The most bytes of what one shared summary covers, as a read returns it: how many messages
(4 digits), a digest of their ids (32), the store's token (32), the first one's id (256
characters, 1,024 bytes of UTF-8) and three separators."""

MAX_SUMMARIES_READ_BYTES = MAX_SUMMARIES * (MAX_SUMMARY_BYTES + SUMMARY_COVER_BYTES + 20)
"""The most bytes one read of a conversation's shared summaries returns, however many
messages each covers: per summary its text, what it covers and its number (at most 20
digits): 1,119,936 bytes (1.07 MiB)."""

MAX_TTL_SECONDS = 10 * 365 * 86_400
"""The longest TTL a conversation takes: ten years."""

MAX_TOKENS = 10**12
"""The largest token count the store records (``record_input_tokens``, a compaction's
tokens freed)."""

MAX_OP_ID_LENGTH = 256
"""The longest ``op_id`` a write takes."""


def count(value: Any, name: str, *, low: int = 0, high: int | None = None) -> int:
    """``value`` as an ``int`` from ``low`` to ``high``; ``TypeError`` for anything that is
    not an integer (a float, a bool, a string), ``ValueError`` out of range."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if number < low:
        raise ValueError(f"{name} must be {'positive' if low == 1 else f'>= {low}'}, got {number}")
    if high is not None and number > high:
        raise LimitExceededError(
            f"{name} is {number}; the limit is {high:,}", limit=name, maximum=high
        )
    return number


INDEX_BOUND = 1 << 53
"""List positions are clamped to this (in magnitude): Redis takes 64-bit positions and the
scripts' Lua numbers are exact to 2**53, and no list is that long."""


def position(value: Any, name: str, *, low: int | None = None) -> int:
    """A list position or length: an ``int`` (``TypeError`` otherwise), at least ``low``
    (``ValueError``), clamped to ``INDEX_BOUND`` either way, which changes no result."""
    number = count(value, name, low=-INDEX_BOUND if low is None else low)
    return max(-INDEX_BOUND, min(number, INDEX_BOUND))


def limited(size: int, maximum: int, what: str) -> None:
    """Raise ``LimitExceededError`` when ``size`` is over ``maximum``."""
    if size > maximum:
        raise LimitExceededError(
            f"{what} is {size:,}; the limit is {maximum:,}", limit=what, maximum=maximum
        )


def ttl_ms(ttl: Any, name: str = "ttl") -> int:
    """A TTL (seconds as an int or float, or a ``timedelta``) in whole milliseconds, at least
    1; ``None`` is 0 (no TTL)."""
    if ttl is None:
        return 0
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise TypeError(f"{name} must be seconds or a timedelta, got {type(ttl).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be positive and finite, got {ttl!r}")
    if seconds > MAX_TTL_SECONDS:
        raise LimitExceededError(
            f"{name} is {seconds:g} s; the limit is {MAX_TTL_SECONDS:,} s (ten years)",
            limit=name,
            maximum=MAX_TTL_SECONDS,
        )
    return max(1, round(seconds * 1000))


def op_id(value: Any) -> str | None:
    """``value`` if it is ``None`` or a usable ``op_id``: a non-empty ``str`` of at most
    :data:`MAX_OP_ID_LENGTH` characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"op_id must be a string, got {type(value).__name__}")
    if not value:
        raise ValueError("op_id must be a non-empty string")
    limited(len(value), MAX_OP_ID_LENGTH, "op_id length")
    return value
