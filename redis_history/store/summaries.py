"""The sans-IO core of a ``HistoryManager``'s shared summaries.

The summaries of one conversation live in its ``summaries`` hash
(:attr:`~redis_history.store.keys.ConversationKeys.summaries`, laid out in
``lua/includes/summaries.lua``). Each operation is a :class:`~redis_history.wire.call.Call`:
the script, its keys and arguments, checked against :mod:`redis_history.limits` before anything
is sent, and the reply's decoding. The context layer's manager runs the calls through its
history's ``execute``: a :class:`~redis_history.RedisHistory`'s, or an
:class:`~redis_history.AsyncRedisHistory`'s, awaited.

A summary covers a run of consecutive messages (what one request left out is one), kept as
the run's first id, its length and a digest of its ids (:func:`span_digest`), so what a read
returns does not grow with the ids (:data:`~redis_history.limits.MAX_SUMMARIES_READ_BYTES`).
The script sees a message only as the digest of its id (:func:`message_digest`), 8 bytes
whatever the id's length.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis_history import limits
from redis_history.errors import CorruptHistoryError, HistoryError
from redis_history.models import MAX_ID_LENGTH
from redis_history.store.core import _call
from redis_history.store.keys import ConversationKeys
from redis_history.wire.call import Call
from redis_history.wire.scripts import refusal

__all__ = ["StoredSummary", "SummaryCore", "message_digest", "span_digest"]

DIGEST_BYTES = 8
"""The bytes of a message id's digest, the name of its state in the hash (``DIGEST`` in
``lua/includes/summaries.lua``): 64 bits, so two ids of one conversation's million share one
with a chance under 10^-7."""
MAX_TOKEN_LENGTH = 32
"""The longest claim token (letters and digits)."""


def message_digest(message_id: str) -> bytes:
    """The digest a message is known by in the summaries hash."""
    return hashlib.blake2b(
        message_id.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES
    ).digest()


def span_digest(ids: Sequence[str]) -> str:
    """The digest of a run of message ids, in order (hex, 32 digits)."""
    joined = "\x00".join(ids).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(joined, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """One shared summary, as kept in Redis."""

    seq: int
    """Its place among the conversation's summaries (they are read oldest first)."""
    text: str
    """The summary."""
    first: str
    """The id of the first message it covers."""
    count: int
    """How many consecutive messages it covers, from :attr:`first`."""
    digest: str
    """:func:`span_digest` of their ids."""

    def covers(self, positions: Mapping[str, int], ids: Sequence[str]) -> bool:
        """Whether its messages are all still in the history whose ids are ``ids`` (``positions``
        maps each to its index), in the run it covers."""
        start = positions.get(self.first)
        if start is None or start + self.count > len(ids):
            return False
        return span_digest(ids[start : start + self.count]) == self.digest


class SummaryCore:
    """Script calls on one conversation's shared summaries."""

    def __init__(self, keys: ConversationKeys, conversation_id: str, namespace: str) -> None:
        self._keys = (keys.summaries, keys.meta)
        self._conversation_id = conversation_id
        self._namespace = namespace

    def _corrupt(self, reason: str) -> HistoryError:
        exc = CorruptHistoryError(f"shared summaries: {reason}")
        exc.conversation_id, exc.namespace = self._conversation_id, self._namespace
        return exc

    def _refused(self, reply: Any) -> HistoryError:
        exc = refusal(reply)
        exc.conversation_id, exc.namespace = self._conversation_id, self._namespace
        return exc

    def read(self) -> Call[list[StoredSummary]]:
        """The kept summaries, oldest first (refreshing the hash's TTL): at most
        :data:`~redis_history.limits.MAX_SUMMARIES_READ_BYTES` returned.

        Raises (when run):
            CorruptHistoryError: the hash holds more than a summary can be.
        """
        return _call(self._records, "read_summaries", self._keys, (), waits=False)

    def _records(self, reply: Any) -> list[StoredSummary]:
        if reply and not isinstance(reply[0], list):
            raise self._refused(reply)
        return [self._record(*record) for record in reply]

    def _record(self, seq: int, text: bytes | str, cover: bytes | str) -> StoredSummary:
        raw = cover.encode("utf-8", "surrogatepass") if isinstance(cover, str) else cover
        try:
            count, digest, _token, first = raw.split(b":", 3)
            summary = StoredSummary(
                int(seq),
                text.decode() if isinstance(text, bytes) else text,
                first.decode("utf-8", "surrogatepass"),
                int(count),
                digest.decode("ascii"),
            )
        except ValueError as exc:
            raise self._corrupt(f"summary {seq} covers {raw!r}") from exc
        if not 0 < summary.count <= limits.MAX_SUMMARY_MESSAGES or len(summary.digest) != 32:
            raise self._corrupt(f"summary {seq} covers {raw!r}")
        return summary

    def claim(
        self,
        ids: Sequence[str],
        *,
        token: str,
        now_ms: int,
        claim_ms: int,
        stale: Sequence[int] = (),
    ) -> Call[list[int] | None]:
        """Claim, of ``ids`` (evicted, oldest first), the oldest run of consecutive free ones,
        at most :data:`~redis_history.limits.MAX_SUMMARY_MESSAGES`; first drop the ``stale``
        summaries. The reply is the claimed positions in ``ids``, or ``None`` without a
        conversation.

        Raises:
            LimitExceededError: more than ``MAX_SUMMARY_CANDIDATES`` ids, or stale seqs than
                ``MAX_SUMMARIES``.
            ValueError: ``token`` is not 1 to 32 letters and digits.
        """
        limits.limited(len(ids), limits.MAX_SUMMARY_CANDIDATES, "evicted messages offered")
        limits.limited(len(stale), limits.MAX_SUMMARIES, "stale summaries dropped")
        claim_ms = limits.count(claim_ms, "claim_ms", low=1, high=limits.MAX_TTL_SECONDS * 1000)
        args = (
            now_ms,
            claim_ms,
            _token(token),
            limits.MAX_SUMMARY_MESSAGES,
            len(stale),
            *(limits.count(seq, "a stale seq", low=1) for seq in stale),
            *map(message_digest, _ids(ids)),
        )
        return _call(self._claimed, "claim_summary", self._keys, args, waits=False)

    def _claimed(self, reply: Any) -> list[int] | None:
        if isinstance(reply, int):
            return None
        if len(reply) != 2:
            raise self._refused(reply)
        first, n = int(reply[0]), int(reply[1])
        return list(range(first - 1, first - 1 + n))

    def store(self, text: str, ids: Sequence[str], *, token: str, kept: int) -> Call[int | None]:
        """Keep ``text`` as the summary of ``ids`` (a run of consecutive messages, claimed
        under ``token``), at most ``kept`` summaries in all. The reply is its seq; ``None``
        when nothing was stored: no conversation, or a message of ``ids`` is no longer claimed
        under ``token`` (its claim expired and another pod claimed it).

        Raises:
            LimitExceededError: ``text`` longer than ``MAX_SUMMARY_BYTES``, more ids than
                ``MAX_SUMMARY_MESSAGES``, an id longer than ``MAX_ID_LENGTH``.
            ValueError: no ids, or ``token`` is not 1 to 32 letters and digits.
        """
        limits.limited(len(text.encode()), limits.MAX_SUMMARY_BYTES, "a summary's bytes")
        limits.limited(len(ids), limits.MAX_SUMMARY_MESSAGES, "messages one summary covers")
        if not ids:
            raise ValueError("a summary covers at least one message")
        limits.limited(max(map(len, _ids(ids))), MAX_ID_LENGTH, "a message id's length")
        kept = limits.count(kept, "kept", low=1, high=limits.MAX_SUMMARIES)
        token = _token(token)
        cover = f"{len(ids)}:{span_digest(ids)}:{token}:".encode() + ids[0].encode(
            "utf-8", "surrogatepass"
        )
        digests = b"".join(map(message_digest, ids))
        args = (token, kept, text, cover, digests)
        return _call(self._stored, "store_summary", self._keys, args, waits=False)

    def _stored(self, reply: Any) -> int | None:
        if isinstance(reply, list):
            raise self._refused(reply)
        return int(reply) if int(reply) > 0 else None


def _ids(ids: Sequence[str]) -> Sequence[str]:
    if not all(isinstance(i, str) and i for i in ids):
        raise TypeError("message ids are non-empty strings")
    return ids


def _token(token: str) -> str:
    if not (isinstance(token, str) and token.isascii() and token.isalnum()):
        raise ValueError(f"a claim token is letters and digits, got {token!r}")
    if len(token) > MAX_TOKEN_LENGTH:
        raise ValueError(f"a claim token is at most {MAX_TOKEN_LENGTH} characters")
    return token
