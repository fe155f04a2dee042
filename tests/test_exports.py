"""The public surface: one sorted ``__all__`` whose names all exist."""

from __future__ import annotations

import redis_history
from redis_history import errors


def test_all_is_sorted_and_complete() -> None:
    """__all__ is sorted, unique, and every name in it is importable."""
    assert redis_history.__all__ == sorted(set(redis_history.__all__))
    for name in redis_history.__all__:
        assert getattr(redis_history, name) is not None


def test_public_names_are_exported() -> None:
    """Every public class defined in the package's modules is exported."""
    exported = set(redis_history.__all__)
    for name in [
        "Message",
        "ToolCall",
        "RedisHistory",
        "AsyncRedisHistory",
        "HistoryError",
        "RoleOrderError",
        "ToolPairingError",
        "MessageTooLargeError",
        "CorruptHistoryError",
        "StaleSnapshotError",
        "StoreUnavailableError",
        "CompactionPolicy",
        "CompactionState",
        "ExtractiveSummarizer",
        "OpenAICompatibleSummarizer",
    ]:
        assert name in exported


def test_every_error_in_the_tree_is_exported_and_a_history_error() -> None:
    """Each exception in redis_history.errors is public and one ``except HistoryError`` away."""
    for name in errors.__all__:
        assert name in redis_history.__all__
        assert issubclass(getattr(errors, name), errors.HistoryError)
