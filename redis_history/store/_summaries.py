"""The sans-IO core of a ``HistoryManager``'s shared summaries.

The summaries of one conversation live in its ``summaries`` hash
(:attr:`~redis_history.store.keys.ConversationKeys.summaries`, laid out in
``lua/includes/summaries.lua``). Each operation is a :class:`~redis_history.store._core.Call`:
the script, its keys and arguments, checked against :mod:`redis_history.limits` before anything
is sent, and the reply's decoding. The context layer's manager runs the calls through its
history's ``execute``: a :class:`~redis_history.RedisHistory`'s, or an
:class:`~redis_history.AsyncRedisHistory`'s, awaited.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis_history import limits
from redis_history.errors import CorruptHistoryError, HistoryError
from redis_history.store._core import Call, _call
from redis_history.store.keys import ConversationKeys

__all__ = ["StoredSummary", "SummaryCore"]


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """One shared summary, as kept in Redis."""

    seq: int
    """Its place among the conversation's summaries (they are read oldest first)."""
    text: str
    """The summary."""
    ids: tuple[str, ...]
    """The ids of the messages it covers, oldest first."""


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

    def read(self) -> Call[list[StoredSummary]]:
        """The kept summaries, oldest first (refreshing the hash's TTL)."""
        return _call(self._records, "read_summaries", self._keys, (), waits=False)

    def _records(self, reply: Any) -> list[StoredSummary]:
        out: list[StoredSummary] = []
        for seq, raw in zip(reply[::2], reply[1::2], strict=True):
            try:
                record = json.loads(raw)
                text, ids = record["text"], record["ids"]
            except (ValueError, KeyError, TypeError) as exc:
                raise self._corrupt(f"summary {seq} is not a record: {raw!r}") from exc
            if not isinstance(text, str) or not all(isinstance(i, str) for i in ids):
                raise self._corrupt(f"summary {seq} is not a record: {raw!r}")
            out.append(StoredSummary(int(seq), text, tuple(ids)))
        return out

    def claim(
        self,
        ids: Sequence[str],
        *,
        token: str,
        now_ms: int,
        claim_ms: int,
        stale: Sequence[int] = (),
    ) -> Call[list[int] | None]:
        """Claim, of ``ids`` (evicted, oldest first), the oldest free ones, at most
        :data:`~redis_history.limits.MAX_SUMMARY_MESSAGES`; first drop the ``stale`` summaries.
        The reply is the claimed positions in ``ids``, or ``None`` without a conversation.

        Raises:
            LimitExceededError: more than ``MAX_SUMMARY_CANDIDATES`` ids, or stale seqs than
                ``MAX_SUMMARIES``.
        """
        limits.limited(len(ids), limits.MAX_SUMMARY_CANDIDATES, "evicted messages offered")
        limits.limited(len(stale), limits.MAX_SUMMARIES, "stale summaries dropped")
        claim_ms = limits.count(claim_ms, "claim_ms", low=1, high=limits.MAX_TTL_SECONDS * 1000)
        args = (
            now_ms,
            claim_ms,
            token,
            limits.MAX_SUMMARY_MESSAGES,
            len(stale),
            *stale,
            *ids,
        )
        return _call(self._claimed, "claim_summary", self._keys, args, waits=False)

    @staticmethod
    def _claimed(reply: Any) -> list[int] | None:
        if isinstance(reply, int):
            return None
        return [int(position) - 1 for position in reply]

    def store(self, text: str, ids: Sequence[str], *, token: str, kept: int) -> Call[int]:
        """Keep ``text`` as the summary of ``ids`` (claimed under ``token``), at most ``kept``
        summaries in all. The reply is its seq, 0 without a conversation.

        Raises:
            LimitExceededError: ``text`` longer than ``MAX_SUMMARY_BYTES``, more ids than
                ``MAX_SUMMARY_MESSAGES``.
        """
        limits.limited(len(text.encode()), limits.MAX_SUMMARY_BYTES, "a summary's bytes")
        limits.limited(len(ids), limits.MAX_SUMMARY_MESSAGES, "messages one summary covers")
        kept = limits.count(kept, "kept", low=1, high=limits.MAX_SUMMARIES)
        record = json.dumps({"text": text, "ids": list(ids), "token": token})
        args = (token, kept, record, *ids)
        return _call(int, "store_summary", self._keys, args, waits=False)
