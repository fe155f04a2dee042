"""Embedders the command-line tests name by dotted path."""

from __future__ import annotations

from redis_history.memory.embedders import HashingEmbedder

OTHER = HashingEmbedder(32, name="other")
"""An embedder of another space than the default ``hashing`` one."""
