"""Token counters: exact tiktoken counts offline, a heuristic never called exact, resolution."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
import tiktoken.load

from redis_history import Message, ToolCall
from redis_history.tokens import (
    HeuristicCounter,
    TiktokenCounter,
    load_encoding,
    message_tokens,
    resolve_counter,
)


@pytest.mark.parametrize(
    ("encoding", "text", "ids"),
    [
        ("o200k_base", "hello world", [24912, 2375]),
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


def test_building_needs_no_network_and_leaves_the_environment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh build reads only packaged files: no download, no env var, no cache dir."""

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("tried to reach the network")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    environ = dict(os.environ)
    load_encoding.cache_clear()
    try:
        counter = TiktokenCounter("cl100k_base")
        assert counter.encoding.encode("hello world") == [15339, 1917]
    finally:
        load_encoding.cache_clear()
    assert dict(os.environ) == environ
    assert "TIKTOKEN_CACHE_DIR" not in os.environ


def test_special_token_text_is_ordinary_text() -> None:
    """User text containing <|endoftext|> is counted, not refused."""
    assert TiktokenCounter().count("a <|endoftext|> b") > 3


def test_unknown_encoding_is_a_value_error() -> None:
    """Only the offline encodings can be built."""
    with pytest.raises(ValueError, match="o200k_base"):
        TiktokenCounter("p50k_base")


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("abcd", 1), ("abcde", 2), ("日本語", 3), ("hi 🙂", 2)],
)
def test_heuristic_counts(text: str, tokens: int) -> None:
    """Four ASCII characters per token, one per other character."""
    assert HeuristicCounter().count(text) == tokens


def test_heuristic_is_never_exact() -> None:
    """The heuristic says it is an estimate."""
    assert not HeuristicCounter().exact
    assert not resolve_counter("heuristic").exact


def test_model_names_choose_the_encoding() -> None:
    """gpt-4o counts with o200k, gpt-4 with cl100k; unknown models are refused."""
    assert TiktokenCounter.for_model("gpt-4o").name == "o200k_base"
    assert TiktokenCounter.for_model("gpt-4").name == "cl100k_base"
    with pytest.raises(ValueError, match="no known tokenizer"):
        TiktokenCounter.for_model("my-own-llm")


class WordCounter:
    name = "words"
    exact = False

    def count(self, text: str) -> int:
        return len(text.split())


def test_resolve_counter_accepts_objects_aliases_models_and_paths() -> None:
    """None is o200k; aliases, model names, dotted paths and objects all resolve."""
    assert resolve_counter(None).name == "o200k_base"
    assert resolve_counter("cl100k_base").name == "cl100k_base"
    assert resolve_counter("tiktoken").name == "o200k_base"
    assert resolve_counter("gpt-4").name == "cl100k_base"
    assert isinstance(resolve_counter("redis_history.tokens:HeuristicCounter"), HeuristicCounter)
    assert isinstance(resolve_counter("redis_history.tokens.HeuristicCounter"), HeuristicCounter)
    words = WordCounter()
    assert resolve_counter(words) is words


def test_resolve_counter_refuses_what_does_not_fit() -> None:
    """Unknown names and non-counters raise clear errors."""
    with pytest.raises(ValueError, match="unknown token counter"):
        resolve_counter("nonsense")
    with pytest.raises(TypeError, match="not a TokenCounter"):
        resolve_counter("redis_history.models:ROLES")
    with pytest.raises(TypeError, match="TokenCounter"):
        resolve_counter(42)  # type: ignore[arg-type]


def test_message_tokens_counts_the_chat_format() -> None:
    """Overhead, role and content for a plain message; names and tool calls add to it."""
    counter = WordCounter()
    assert message_tokens(Message.user("one two three"), counter) == 3 + 1 + 3
    named = Message.user("one two three", name="ann")
    assert message_tokens(named, counter) == 3 + 1 + 3 + 2
    calling = Message.assistant("", tool_calls=[ToolCall(id="c", name="f", arguments={"q": "a b"})])
    assert message_tokens(calling, counter) == 3 + 1 + 0 + (1 + 2 + 3)
    assert message_tokens(Message.tool("r", tool_call_id="c"), counter) == 3 + 1 + 1 + 1
