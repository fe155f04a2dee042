"""Fitting a conversation into a model's window: whole turns, priced as each format frames them.

:func:`fit_to_budget` drops the oldest whole turns until the request, plus a reserve for the
reply, fits a token budget. A turn goes whole or stays whole (its user message, the
assistant's steps, every tool call with its result), so the fitted list is always a valid
request; the lead (the system prompt, or the summaries compaction left in its place) and the
current turn (the last one) are always kept, and when even they do not fit,
:class:`~redis_history.errors.BudgetExceededError` says by how much.

Prices (:func:`request_tokens`) are the request as the format frames it (:data:`FRAMINGS`).
In ``"openai_chat"`` that is OpenAI's cookbook recipe over the request ``render`` makes: 3
tokens a message, its role, content, ``name`` (plus 1; not on tool results, which render
without it) and ``tool_call_id``, each tool call's ``function`` object as JSON (its name and
arguments string), and 3 to prime the reply. With the default counter (``counter=None``:
:data:`~redis_history.tokens.REQUEST_COUNTER`, ``o200k_base``) that is tiktoken's count of the
rendered request, token for token; ``tests/test_budget.py`` checks it on 400 seeded messages
of code, JSON tool results, CJK and emoji, and on a held-out corpus of code, tool output, CJK,
emoji, short chat and mixed histories (``benchmarks/bench_budget.py``).

The default is exact because a pricing error is the model's: priced under, a fitted request
is larger than the window. On that corpus the estimate (``counter="estimate"``, what a
history prices its appends with) priced fitted requests up to 8.9% under (JSON and tool
output; emoji 8.1%, code 4.1%) and up to 49% over (CJK), and no weights of its character
classes keep every kind of text within 1% under and 3% over: the best, fitted on that very
corpus, still range from 3.3% under to 5.3% over (``benchmarks/refit_estimate.py``). Exact
counts are remembered by text (:class:`~redis_history.tokens.TextMemo`, 4,000,000 characters
a counter), so a history read anew from Redis and priced again costs dict lookups: fitting a
128k-token history of 542 messages took 2.0 ms so (41 ms the first time, 4.6 ms with the
estimate; ``docs/benchmarks.md``).
A message's price in ``"openai_chat"`` is the one the store records when it is written with
the same counter (:func:`~redis_history.tokens.message_tokens`): one recipe,
:func:`~redis_history.tokens.price`.

``"openai_responses"`` and ``"anthropic"`` are priced by the same recipe, without the names
those formats drop. Neither API publishes its framing, and Anthropic's tokenizer is not
public, so for them the count is an estimate of the same order, not a bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from redis_history.context.formats import WireFormat, unknown_format
from redis_history.errors import BudgetExceededError
from redis_history.models import Message
from redis_history.tokens import (
    CHAT,
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    REQUEST_COUNTER,
    Framing,
    TokenCounter,
    anthropic_image_price,
    price,
    resolve_counter,
)
from redis_history.turns import group_turns

__all__ = [
    "FRAMINGS",
    "Framing",
    "fit_to_budget",
    "framing_of",
    "message_price",
    "request_tokens",
]


FRAMINGS: Mapping[WireFormat, Framing] = MappingProxyType(
    {
        "openai_chat": CHAT,
        "openai_responses": Framing(MESSAGE_OVERHEAD, 0, REPLY_PRIMING, names=False),
        "anthropic": Framing(
            MESSAGE_OVERHEAD, 0, REPLY_PRIMING, names=False, image=anthropic_image_price
        ),
    }
)
"""Each :data:`~redis_history.context.WireFormat`'s framing; see the module docstring."""


def framing_of(format: WireFormat) -> Framing:
    """``format``'s framing; ``ValueError`` for an unknown format."""
    try:
        return FRAMINGS[format]
    except KeyError:
        raise unknown_format(format) from None


def request_counter(counter: TokenCounter | str | None) -> TokenCounter:
    """The counter that prices a request: ``counter``, or :data:`REQUEST_COUNTER` for ``None``
    (exact, remembering its counts; not a history's per-append default, the estimate)."""
    return resolve_counter(REQUEST_COUNTER if counter is None else counter)


def message_price(
    message: Message,
    format: WireFormat = "openai_chat",
    counter: TokenCounter | str | None = None,
) -> int:
    """What ``message`` costs in a request in ``format``, its framing included.

    Args:
        message: The message.
        format: The request's wire format.
        counter: A token counter or its name (:func:`~redis_history.tokens.resolve_counter`);
            by default ``o200k_base``, exact (:func:`request_counter`).

    Raises:
        ValueError: An unknown format or counter name.
    """
    return price(message, framing_of(format), request_counter(counter))


def request_tokens(
    messages: Sequence[Message],
    format: WireFormat = "openai_chat",
    counter: TokenCounter | str | None = None,
    *,
    system_prompt: str | None = None,
) -> int:
    """What the request :func:`~redis_history.context.render` makes of ``messages`` costs.

    Args:
        messages: The request's messages, oldest first.
        format: Its wire format.
        counter: A token counter or its name; by default ``o200k_base``, exact.
        system_prompt: A prompt sent before the messages, priced as a system message.

    Returns:
        The tokens of every message with its framing, plus the reply priming.

    Raises:
        ValueError: An unknown format or counter name.
    """
    framing, count = framing_of(format), request_counter(counter)
    tokens = framing.request + sum(price(m, framing, count) for m in messages)
    if system_prompt is not None:
        tokens += price(Message.system(system_prompt), framing, count)
    return tokens


@dataclass(frozen=True, slots=True)
class TurnSplit:
    """A message list cut into what fitting keeps, what it may drop, and what it must keep."""

    lead: list[Message]
    """The leading system messages (prompt or summaries): always kept."""
    older: list[list[Message]]
    """Every whole turn before the current one, oldest first, each without the lead; a turn
    without steps before another (two user messages in a row) is one with it."""
    current: list[Message]
    """The last turn (the one being answered): always kept. Empty when there is none."""


def split_turns(messages: Sequence[Message]) -> TurnSplit:
    """Cut ``messages`` into its lead, the older whole turns and the current turn.

    Read by the lenient role rules (``group_turns(roles="lenient")``), which take what a
    history written by either rules holds. A user message the model has not answered
    before the next one (sent in two messages) goes with the turn after it, so a question
    is kept or dropped whole.

    Raises:
        ToolPairingError: A result without its call, calls left unanswered.
        RoleOrderError: Roles out of order.
    """
    turns = group_turns(messages, roles="lenient")
    if not turns:
        return TurnSplit([], [], [])
    lead = list(turns[0].lead)
    bodies: list[list[Message]] = []
    unanswered: list[Message] = []
    for position, turn in enumerate(turns):
        body = turn.to_messages()[len(turn.lead) :]
        if body and not turn.steps and position < len(turns) - 1:
            unanswered += body
        elif body:
            bodies.append([*unanswered, *body])
            unanswered = []
    if not bodies:
        return TurnSplit(lead, [], [])
    return TurnSplit(lead, bodies[:-1], bodies[-1])


def keep_newest(
    turns: Sequence[Sequence[Message]], room: int, price: Callable[[Message], int]
) -> tuple[int, int]:
    """Where the longest run of trailing ``turns`` whose prices fit ``room`` starts
    (``len(turns)`` when not even the last fits), and what they cost. Turns older than the
    first that does not fit are never priced."""
    start, spent = len(turns), 0
    while start:
        cost = sum(map(price, turns[start - 1]))
        if spent + cost > room:
            break
        spent += cost
        start -= 1
    return start, spent


def budget_error(budget: int, parts: dict[str, int], what: str) -> BudgetExceededError:
    """The error for ``parts`` (which must all be kept) needing more than ``budget``."""
    required = sum(parts.values())
    detail = ", ".join(f"{name} {tokens}" for name, tokens in parts.items())
    return BudgetExceededError(
        f"a budget of {budget} tokens cannot hold {what}: {required} needed ({detail})",
        budget=budget,
        required=required,
        parts=parts,
    )


def fit_to_budget(
    messages: Sequence[Message],
    budget: int,
    *,
    reserve: int = 0,
    counter: TokenCounter | str | None = None,
    format: WireFormat = "openai_chat",
    system_prompt: str | None = None,
) -> list[Message]:
    """The most recent whole turns of ``messages`` that fit ``budget`` with ``reserve`` to spare.

    Drops the oldest whole turns, never part of one, so no tool call is separated from its
    result. The lead (leading system messages: the prompt, or compaction's summaries) and the
    current turn (the last, from its user message on) are always kept. The result is a
    suffix of whole turns after the lead, and it is the longest one: keeping the next older
    turn as well would not fit.

    Args:
        messages: The conversation, oldest first (``history.snapshot()``, plus the turn in
            progress if it is not stored yet).
        budget: The tokens the request may use (the model's window, or less).
        reserve: Tokens kept free, e.g. for the reply (``max_tokens``).
        counter: A token counter or its name; by default ``o200k_base``, exact, whose
            counts are remembered by text, so pricing the same history again is dict
            lookups. ``"estimate"`` loads no tokenizer, but can be 9% under (see above).
        format: The wire format the request will be rendered in (its framing is priced).
        system_prompt: A prompt that will be sent before the messages (``render``'s
            ``system_prompt``), priced and always kept.

    Returns:
        The lead, then the kept turns' messages, in order: ``request_tokens(result, format,
        counter, system_prompt=system_prompt) + reserve <= budget``.

    Raises:
        BudgetExceededError: The system prompt, the lead, the current turn and the reserve
            alone need more than ``budget`` (the error carries each part's tokens).
        ToolPairingError: A result without its call, or calls left unanswered.
        RoleOrderError: Roles out of order.
        ValueError: A negative budget or reserve, an unknown format or counter.
    """
    if budget < 0 or reserve < 0:
        raise ValueError(f"budget and reserve must be >= 0, got {budget} and {reserve}")
    framing, count = framing_of(format), request_counter(counter)
    split = split_turns(messages)
    system = sum(price(m, framing, count) for m in split.lead)
    if system_prompt is not None:
        system += price(Message.system(system_prompt), framing, count)
    parts = {
        "request": framing.request,
        "system": system,
        "current_turn": sum(price(m, framing, count) for m in split.current),
        "reserve": reserve,
    }
    room = budget - sum(parts.values())
    if room < 0:
        raise budget_error(budget, parts, "the system message, the current turn and the reserve")
    start, _ = keep_newest(split.older, room, lambda m: price(m, framing, count))
    return [*split.lead, *(m for turn in split.older[start:] for m in turn), *split.current]
