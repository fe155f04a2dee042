"""A Redis round trip as data: the command a core builds and how its reply is read, which
the front ends send through :mod:`~redis_history.wire.lane`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from redis_history.wire.scripts import Script

__all__ = ["Call"]

T = TypeVar("T")


class Call(NamedTuple, Generic[T]):
    """One Redis round trip: the command, and ``script`` to send by source if the server
    does not know the script's SHA (the command is then an ``EVALSHA``)."""

    parse: Callable[[Any], T]
    command: tuple[Any, ...]
    script: Script | None = None
    waits: bool = False
    """A write of the conversation's data, which ``wait_replicas`` waits on."""
    staged: tuple[tuple[Any, ...], ...] | None = None
    """The same write as a ``MULTI`` ... ``EXEC`` that keeps its large arguments out of Lua
    (``lua/append-5.lua``), sent instead of ``command`` where one connection can carry
    it (``lane.execute_all``). ``EXEC``'s first reply is the script's."""
    batch: bool = False
    """``command`` is a tuple of commands, sent pipelined (not a transaction); the reply
    is the list of their replies (``store/_pages.py``)."""

    def fallback(self) -> tuple[Any, ...]:
        """The ``EVAL`` of the script's source that stands in for a refused ``EVALSHA``."""
        assert self.script is not None
        return ("EVAL", self.script.source, *self.command[2:])

    def function(self) -> tuple[Any, ...]:
        """The ``FCALL`` of the script's function in the store's library, for a user that may
        run only the store's functions."""
        assert self.script is not None
        return ("FCALL", self.script.function, *self.command[2:])

    def staged_function(self) -> tuple[tuple[Any, ...], ...]:
        """:attr:`staged` with the script's ``FCALL`` in place of its ``EVALSHA``."""
        assert self.staged is not None
        return (self.staged[0], self.function(), *self.staged[2:])
