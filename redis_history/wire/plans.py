"""Plans: one implementation of a multi-step operation for the sync and the asyncio API.

A plan is a generator that yields the steps it needs done (a Redis call, a summary, a
recall...), is sent each step's result, or thrown its error where the plan can handle it, and
returns the operation's result. Each front end runs it with :func:`drive` or :func:`adrive`,
given how it does one step, so the rules live once and only the I/O is written twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["Plan", "adrive", "drive"]

S = TypeVar("S")
T = TypeVar("T")

Plan = Generator[S, Any, T]
"""A plan yielding steps of type ``S`` and returning ``T``."""


def drive(
    plan: Plan[S, T], do: Callable[[S], Any], *, handed: type[BaseException] = Exception
) -> T:
    """Run ``plan`` to its end, doing each step with ``do``; an exception a step raises is
    thrown into the plan at the step that asked for it. ``handed=BaseException`` hands it
    an interrupt or a cancellation too, for a plan that must undo what it wrote (it
    raises it again once done)."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.send(result) if error is None else plan.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        result, error = None, None
        try:
            result = do(step)
        except handed as exc:
            error = exc


async def adrive(
    plan: Plan[S, T],
    do: Callable[[S], Awaitable[Any]],
    *,
    handed: type[BaseException] = Exception,
) -> T:
    """:func:`drive` with a step done by awaiting ``do``."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.send(result) if error is None else plan.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        result, error = None, None
        try:
            result = await do(step)
        except handed as exc:
            error = exc
