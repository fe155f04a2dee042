"""The sync and asyncio twins, written once.

An operation is one function, with its signature and docstring, that returns what has to be
done: a :class:`~redis_history.wire.call.Call`, or a plan (:mod:`.plans`) of steps. Marked
:func:`twin`, it is a plain method on a class that is a :class:`Runner` and a coroutine
method on one that is an :class:`AsyncRunner`; each front end writes only its runner, the
one place where it does I/O. mypy sees the right method on each (``__get__`` is typed by
the kind of front end).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from types import MethodType
from typing import Any, Concatenate, Generic, NamedTuple, ParamSpec, Self, TypeVar, cast, overload

from redis_history.wire.call import Call
from redis_history.wire.plans import Plan

__all__ = ["AsyncRunner", "On", "Runner", "Work", "twin"]

P = ParamSpec("P")
T = TypeVar("T")

Work = Call[T] | Plan[Any, T]
"""What a twin operation returns for its front end to run: one call, or a plan of steps."""


class On(NamedTuple):
    """A step of a plan that spans two front ends: ``call``, sent by ``front`` (its
    ``execute``) rather than by the front end driving the plan."""

    front: Any
    call: Call[Any]


def _install(cls: type, asynchronous: bool) -> None:
    """Put each :func:`twin` operation ``cls`` inherits in its own namespace as the plain
    function (or coroutine function) it is on this kind of front end, so that calling it
    costs what calling a method costs."""
    for name in dir(cls):
        for base in cls.__mro__:
            if name in vars(base):
                operation = vars(base)[name]
                if isinstance(operation, twin):
                    setattr(cls, name, operation._arun if asynchronous else operation._run)
                break


class Runner:
    """A sync front end: runs the work of its :func:`twin` operations."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _install(cls, asynchronous=False)

    def run(self, work: Work[T]) -> T:
        """Do ``work`` and return its result: send a call, or drive a plan to its end."""
        raise NotImplementedError


class AsyncRunner:
    """An asyncio front end: runs the work of its :func:`twin` operations, awaited."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _install(cls, asynchronous=True)

    async def run(self, work: Work[T]) -> T:
        """:meth:`Runner.run`, awaited."""
        raise NotImplementedError


class twin(Generic[P, T]):
    """An operation written once, as the function that makes its work: a method of both
    twins. A subclass of :class:`Runner` or :class:`AsyncRunner` holds it as the plain
    function it is there; elsewhere it is bound per access (``__get__``)."""

    def __init__(self, make: Callable[Concatenate[Any, P], Work[T]]) -> None:
        self.make = make
        functools.update_wrapper(cast(Any, self), make)

        @functools.wraps(make)
        def run(front: Any, /, *args: Any, **kwargs: Any) -> Any:
            return front.run(make(front, *args, **kwargs))

        @functools.wraps(make)
        async def arun(front: Any, /, *args: Any, **kwargs: Any) -> Any:
            return await front.run(make(front, *args, **kwargs))

        self._run, self._arun = run, arun

    def __call__(self, front: Any, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        """The operation called on the class, given the front end (``RedisHistory.append(h,
        message)``), as a method is."""
        return (self._arun if isinstance(front, AsyncRunner) else self._run)(front, *args, **kwargs)

    @overload
    def __get__(self, front: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, front: Runner, owner: type | None = None) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, front: AsyncRunner, owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, front: object, owner: type | None = None) -> Any:
        if front is None:
            return self
        return MethodType(self._arun if isinstance(front, AsyncRunner) else self._run, front)
