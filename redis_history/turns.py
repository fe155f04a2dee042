"""A conversation as turns, with every tool call and its result held together.

:func:`group_turns` reads a message list as turns (:class:`Turn`): an optional lead
(the system prompt, or the summaries compaction left in its place), one user
message, and the assistant's steps, each a plain reply or a :class:`ToolStep`
(one assistant message and a :class:`ToolPair` for each of its calls, parallel
calls answered in any order). :func:`to_messages` and :func:`from_turns` give
the messages back, exactly: ``to_messages(group_turns(m)) == m``.

Well-formed is what the store enforces (:mod:`redis_history.roles`), so a
history the store's rules accepted groups (one written with ``validate=False``,
or spliced inside a turn, may not):

- The lead is the messages before the first user message: the leading system
  messages, after the first ``summaries`` messages (the ones ``splice_prefix``
  wrote, whatever their role; :meth:`history.turns() <redis_history.RedisHistory.turns>`
  passes how many the conversation starts with). Summaries that read as turns
  by the rules below without leading (the turns a compactor kept, written back
  by ``splice_prefix`` too) are grouped as turns. A lead never holds a tool call
  or a tool result, and belongs to the first turn.
- After the lead comes a user message, as the store's role rules say (after a
  system message only a user may come): an assistant or a tool result before
  any user is refused. The library's compaction cuts at user messages, so it
  never leaves one; a ``splice_prefix`` that cut inside a turn does.
- A turn holds its user message and what answered it. Only the last turn may
  have no step, or end with a tool step (a pod between model calls).
- ``roles="lenient"`` groups what a history's writes leave by either set of role rules
  (:mod:`redis_history.roles`): a list the strict rules take is grouped as they group
  it; otherwise two user messages in a row are two turns, the first without steps, a
  user message after a tool step opens a turn, and assistant messages in a row are
  steps of one turn. The histories' ``turns()``, compaction and the context layer read
  conversations so, since any pod may write with either rules.
- A call left unanswered is refused (``ToolPairingError``), unless
  ``allow_open=True``: then the last step may be open (``ToolStep.unanswered``),
  so a conversation can be read mid-turn, while a tool runs. Anything else that
  breaks the rules (a result that answers no open call, an answer given twice,
  a user or assistant message while calls are open, a role out of order) is
  refused whatever ``allow_open`` says, with ``ToolPairingError`` or
  ``RoleOrderError`` naming the message's index.

:class:`ToolPair` and :class:`ToolStep` are made only here, by grouping: they
have no public constructor (``dataclasses.replace`` included), so a strategy
that rearranges turns can keep or drop whole turns, steps and pairs, but cannot
make a call without its result or a result without its call. :class:`Turn` can
be built from those parts (to drop steps, say); its own messages are checked,
and :func:`from_turns` checks the whole list again.

Where it sits: beside :mod:`redis_history.roles`, whose rules it gives a shape,
under the store (it reads a stored entry through :class:`StoredMessage`), so the
histories' ``turns()`` can return turns while the store never imports the context
layer (which imports the store). The context
layer re-exports these names (``redis_history.context``) and builds on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import takewhile
from typing import Any, NoReturn, Protocol, TypeAlias

from redis_history.errors import InvalidMessageError, RoleOrderError, ToolPairingError
from redis_history.models import Message, ToolCall
from redis_history.roles import Roles, RoleState

__all__ = [
    "Step",
    "ToolPair",
    "ToolStep",
    "Turn",
    "from_turns",
    "group_entries",
    "group_turns",
    "to_messages",
]


def _made_by_grouping(cls: type) -> NoReturn:
    raise TypeError(f"{cls.__name__} is made by group_turns() only, never from its parts")


def _build(cls: type[Any], **fields: Any) -> Any:
    """An instance of a frozen dataclass without its ``__init__`` (which refuses)."""
    instance = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(instance, name, value)
    return instance


@dataclass(frozen=True, slots=True, init=False)
class ToolPair:
    """One tool call and the tool message that answered it; made only by grouping."""

    call: ToolCall
    """The call, as the assistant message requested it."""
    result: Message
    """The tool message whose ``tool_call_id`` is the call's id."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        _made_by_grouping(type(self))


@dataclass(frozen=True, slots=True, init=False)
class ToolStep:
    """An assistant message that calls tools, and the results, in the order they came.

    Parallel calls make one step with several pairs. Made only by grouping.
    """

    assistant: Message
    """The assistant message (its text too, if it had any) with its ``tool_calls``."""
    pairs: tuple[ToolPair, ...]
    """A pair for each answered call, in the order the results were stored."""
    unanswered: tuple[ToolCall, ...]
    """Calls with no result yet: empty, except in the last step of a list grouped with
    ``allow_open=True``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        _made_by_grouping(type(self))

    @property
    def complete(self) -> bool:
        """Whether every call has its result."""
        return not self.unanswered

    def to_messages(self) -> list[Message]:
        """The assistant message, then the results, as stored."""
        return [self.assistant, *(pair.result for pair in self.pairs)]


Step: TypeAlias = Message | ToolStep
"""What the assistant did in a turn: a plain reply (an assistant message without tool
calls) or a :class:`ToolStep`."""


@dataclass(frozen=True, slots=True)
class Turn:
    """A lead (first turn only), a user message, and the assistant's steps that followed.

    ``user`` is ``None`` only in a history that has a lead and no user message yet
    (a system prompt alone); such a turn has no steps.

    Raises:
        ToolPairingError: a tool result, or an assistant message with tool calls,
            outside a :class:`ToolStep`; an open step that is not the last.
        RoleOrderError: a part of the wrong role, or steps without a user. A turn's own
            messages are checked by the lenient rules, which take what either set of
            rules wrote (a plain reply may be followed by another step);
            :func:`from_turns` checks the whole list by the rules it is given.
        TypeError: a part that is neither a message nor a step.
    """

    lead: tuple[Message, ...] = ()
    """The system prompt or summaries before the first user message (first turn only)."""
    user: Message | None = None
    """The user message that opens the turn."""
    steps: tuple[Step, ...] = ()
    """Plain replies and tool steps, in order."""

    def __post_init__(self) -> None:
        if self.user is None and not self.lead:
            raise RoleOrderError("a turn needs a user message, or a lead in a history without one")
        for message in self.lead:
            _no_loose_tools(message, "a turn's lead")
        if self.user is not None and self.user.role != "user":
            raise RoleOrderError(f"a turn opens with a user message, not {self.user.role}")
        for step in self.steps:
            if isinstance(step, Message):
                _no_loose_tools(step, "a turn's steps")
                if step.role != "assistant":
                    raise RoleOrderError(f"a turn's steps are the assistant's, not {step.role}'s")
            elif not isinstance(step, ToolStep):
                raise TypeError(f"a step is a Message or a ToolStep, not {type(step).__name__}")
        _check(self.to_messages(), len(self.lead), allow_open=True, roles="lenient")

    @property
    def complete(self) -> bool:
        """Whether every tool call in the turn has its result."""
        return all(not isinstance(step, ToolStep) or step.complete for step in self.steps)

    @property
    def tool_pairs(self) -> list[ToolPair]:
        """Every call with its result, in order."""
        return [pair for step in self.steps if isinstance(step, ToolStep) for pair in step.pairs]

    def to_messages(self) -> list[Message]:
        """The turn's messages: the lead, the user message, then each step's, as stored."""
        out = list(self.lead)
        if self.user is not None:
            out.append(self.user)
        for step in self.steps:
            if isinstance(step, ToolStep):
                out += step.to_messages()
            else:
                out.append(step)
        return out


def _no_loose_tools(message: Message, where: str) -> None:
    if not isinstance(message, Message):
        raise TypeError(f"{where} holds messages, not {type(message).__name__}")
    if message.role == "tool":
        raise ToolPairingError(f"a tool result in {where} is not paired with its call")
    if message.tool_calls:
        raise ToolPairingError(f"tool calls in {where} are not paired with their results")


def _lead_length(messages: Sequence[Message], summaries: int) -> int:
    """How many messages the lead holds: the summaries, then any system messages."""
    if not 0 <= summaries <= len(messages):
        raise ValueError(f"summaries must be 0 to {len(messages)}, got {summaries}")
    rest = takewhile(lambda m: m.role == "system", messages[summaries:])
    return summaries + sum(1 for _ in rest)


def _check(
    messages: Sequence[Message], lead: int, *, allow_open: bool, roles: Roles = "strict"
) -> None:
    """Raise unless ``messages[lead:]`` follow a lead (or nothing) by the ``roles`` rules."""
    for index, message in enumerate(messages[:lead]):
        try:
            _no_loose_tools(message, "the lead")
        except ToolPairingError as exc:
            exc.index = index
            raise
    state = RoleState("system" if lead else "")
    for index in range(lead, len(messages)):
        state.advance(messages[index], index=index, roles=roles)
    if state.open and not allow_open:
        last = max(i for i, m in enumerate(messages) if m.role == "assistant")
        raise ToolPairingError(
            f"tool calls left unanswered at the end: {', '.join(state.open)}", index=last
        )


def group_turns(
    messages: Sequence[Message],
    *,
    summaries: int = 0,
    allow_open: bool = False,
    roles: Roles = "strict",
) -> list[Turn]:
    """Group a message list into turns; see this module's docstring for the rules.

    Args:
        messages: the history, oldest first (e.g. ``history.snapshot()``).
        summaries: how many of the first messages are summaries written by
            ``splice_prefix`` (``Entry.summary``); they lead the first turn whatever
            their role, unless the list reads as turns without that (a compactor
            that keeps turns writes them back as summaries too): then they are
            grouped like any other messages. System messages at the start lead too.
        allow_open: accept calls still unanswered at the end (read mid-turn): the
            last step is then a :class:`ToolStep` with ``unanswered`` calls.
        roles: the role rules the list must follow: ``"strict"``, or ``"lenient"`` for
            what writes by either set of rules leave (grouped as the strict rules group
            it when they take it).

    Returns:
        The turns; ``[]`` for no messages. ``to_messages(result) == list(messages)``.

    Raises:
        ToolPairingError: a result that answers no open call (an orphan, or a second
            answer), a message while calls are open, calls unanswered at the end
            (unless ``allow_open``), a tool call or result in the lead.
        RoleOrderError: a role out of order, e.g. an assistant message before any
            user, a system message after the lead, two user messages in a row (strict).
        ValueError: ``summaries`` is negative or more than there are messages.
    """
    messages = list(messages)
    lead = _lead_length(messages, summaries)
    if summaries and (plain := _lead_length(messages, 0)) < lead:
        # Summaries that read as turns by themselves (a compactor that kept turns wrote
        # them back) are grouped as turns; only otherwise do they lead whatever their role.
        # The rules decide which (grouping does not depend on them otherwise): a list the
        # strict rules take is read as they read it, whatever ``roles``.
        tries = [
            (rules, start) for rules in dict.fromkeys(("strict", roles)) for start in (plain, lead)
        ]
        for rules, start in tries[:-1]:
            try:
                _check(messages, start, allow_open=allow_open, roles=rules)
            except InvalidMessageError:
                continue
            return _grouped(messages, start)
    _check(messages, lead, allow_open=allow_open, roles=roles)
    return _grouped(messages, lead)


class StoredMessage(Protocol):
    """What grouping reads of a stored entry (:class:`~redis_history.Entry` is one)."""

    @property
    def summary(self) -> bool: ...

    @property
    def message(self) -> Message: ...


def group_entries(
    entries: Sequence[StoredMessage], *, allow_open: bool = False, roles: Roles = "strict"
) -> list[Turn]:
    """:func:`group_turns` of stored entries (``history.entries()``), the summaries at their
    head leading the first turn."""
    summaries = sum(1 for _ in takewhile(lambda entry: entry.summary, entries))
    messages = [entry.message for entry in entries]
    return group_turns(messages, summaries=summaries, allow_open=allow_open, roles=roles)


def _grouped(messages: list[Message], lead: int) -> list[Turn]:
    """The turns of a list ``_check`` accepted."""
    turns: list[Turn] = []
    head: tuple[Message, ...] = tuple(messages[:lead])
    user: Message | None = None
    steps: list[Step] = []
    calling: Message | None = None  # the assistant message of the tool step being read
    pairs: list[ToolPair] = []

    def close_step() -> None:
        nonlocal calling, pairs
        if calling is not None:
            answered = {pair.call.id for pair in pairs}
            open_calls = tuple(c for c in calling.tool_calls if c.id not in answered)
            steps.append(
                _build(ToolStep, assistant=calling, pairs=tuple(pairs), unanswered=open_calls)
            )
            calling, pairs = None, []

    def close_turn() -> None:
        nonlocal head, user, steps
        close_step()
        if head or user is not None:
            turns.append(_build(Turn, lead=head, user=user, steps=tuple(steps)))
        head, user, steps = (), None, []

    for message in messages[lead:]:
        if message.role == "user":
            if user is not None:
                close_turn()
            user = message
        elif message.role == "assistant":
            close_step()
            if message.tool_calls:
                calling = message
            else:
                steps.append(message)
        else:  # a tool result; _check made sure it answers an open call of ``calling``
            assert calling is not None
            call = next(c for c in calling.tool_calls if c.id == message.tool_call_id)
            pairs.append(_build(ToolPair, call=call, result=message))
    close_turn()
    return turns


def to_messages(turns: Iterable[Turn]) -> list[Message]:
    """The messages of ``turns``, in order, exactly as grouped (no checks: see
    :func:`from_turns` for a list a strategy rearranged)."""
    return [message for turn in turns for message in turn.to_messages()]


def from_turns(turns: Sequence[Turn], *, roles: Roles = "strict") -> list[Message]:
    """The messages of ``turns``, checked to be a well-formed history.

    What a strategy that drops or keeps whole turns and steps returns through:
    pairs are whole by construction, and this refuses what rearranging can still
    break (a lead after the first turn, a turn that ends in a tool step followed
    by another turn, a reply without the user message it answers), by the ``roles``
    rules (``"lenient"``: what writes by either set of rules leave; there, a turn
    without steps or ending in a tool step may come before another).

    Raises:
        ToolPairingError: an open step that is not the last thing in the list.
        RoleOrderError: a lead after the first turn, or turns that do not follow one
            another by the role rules.
    """
    if any(turn.lead for turn in turns[1:]):
        raise RoleOrderError("only the first turn has a lead")
    messages = to_messages(turns)
    _check(messages, len(turns[0].lead) if turns else 0, allow_open=True, roles=roles)
    return messages
