"""Summarizers: the extractive one, resolution, the OpenAI-compatible client on a real server."""

from __future__ import annotations

import socket
import sys
import traceback
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from chat_server import ChatServer, Reply, completion
from echoes import escaped_forms
from hypothesis import given, settings
from hypothesis import strategies as st

from redis_history.compaction.summarizers import (
    ALIASES,
    DEFAULT_PROMPT,
    PREFIX,
    ExtractiveSummarizer,
    OpenAICompatibleSummarizer,
    Summarizer,
    SummarizerError,
    render_transcript,
    resolve_summarizer,
)
from redis_history.compaction_policy import CompactionContext
from redis_history.errors import HistoryError
from redis_history.models import Message, ToolCall

SECRET = "sk-test-do-not-leak-4242"


def conversation() -> list[Message]:
    """A system prompt and two turns, the first with a tool call."""
    return [
        Message.system("You are a travel agent."),
        Message.user("Book a flight to Paris for Alice on 2026-03-14."),
        Message.assistant(
            "Let me search.",
            tool_calls=[ToolCall(id="c1", name="search_flights", arguments={"to": "CDG"})],
        ),
        Message.tool("AF123 departs 09:40, 420 EUR", tool_call_id="c1"),
        Message.assistant("AF123 at 09:40 costs 420 EUR. Shall I book it?"),
        Message.user("Yes, book AF123."),
        Message.assistant(
            "", tool_calls=[ToolCall(id="c2", name="book", arguments={"f": "AF123"})]
        ),
        Message.tool("booking ref XK7Q", tool_call_id="c2", name="book_flight"),
        Message.assistant("Booked: reference XK7Q."),
    ]


def earlier_summary(text: str, prompt: str = "You are a travel agent.") -> Message:
    """A summary message shaped like ``compaction._summary_message`` writes it."""
    return Message.system(
        f"{prompt}\n\n{text}",
        metadata={"summary": True, "system_prompt": prompt, "covers": ["a"], "tokens_replaced": 9},
    )


# ---------------------------------------------------------------- extractive


def test_extractive_keeps_first_and_last_user_messages_and_tool_results() -> None:
    """The extract holds the first and last user messages and every tool result, in order."""
    text = ExtractiveSummarizer().summarize(conversation())
    assert text == (
        "Previously:\n"
        "- user (first): Book a flight to Paris for Alice on 2026-03-14.\n"
        "- tool search_flights: AF123 departs 09:40, 420 EUR\n"
        "- user (last): Yes, book AF123.\n"
        "- tool book_flight: booking ref XK7Q"
    )


def test_extractive_leaves_out_the_system_prompt_and_assistant_replies() -> None:
    """The system prompt (kept verbatim by compaction) and assistant text are not repeated."""
    text = ExtractiveSummarizer().summarize(conversation())
    assert "travel agent" not in text
    assert "Shall I book it" not in text
    assert "Booked: reference" not in text


def test_extractive_with_a_single_user_message_lists_it_once() -> None:
    """One user message is both first and last, and appears once."""
    text = ExtractiveSummarizer().summarize([Message.user("hi"), Message.assistant("hello")])
    assert text == "Previously:\n- user: hi"


def test_extractive_names_a_tool_result_without_a_known_call_generically() -> None:
    """A tool result whose call is not among the messages is labelled as a plain tool result."""
    text = ExtractiveSummarizer().summarize([Message.tool("42", tool_call_id="gone")])
    assert text == "Previously:\n- tool result: 42"


@pytest.mark.parametrize("max_chars", [21, 22, 40, 61, 100, 250])
def test_extractive_never_exceeds_max_chars(max_chars: int) -> None:
    """Long inputs are cut to at most max_chars characters, keeping the prefix and an ellipsis."""
    long = " ".join(f"word{i}" for i in range(500))
    messages = [
        Message.user(long),
        Message.assistant("", tool_calls=[ToolCall(id="c", name="f")]),
        Message.tool(long, tool_call_id="c"),
        Message.assistant("ok"),
        Message.user("the last question " + long),
    ]
    text = ExtractiveSummarizer(max_chars=max_chars).summarize(messages)
    assert len(text) <= max_chars
    assert text.startswith(PREFIX)
    assert "…" in text


def test_extractive_cuts_the_longest_line_first() -> None:
    """When too long, the short last user message survives whole and the long one is clipped."""
    messages = [Message.user("x " * 2000), Message.assistant("ok"), Message.user("Now book it.")]
    text = ExtractiveSummarizer(max_chars=200).summarize(messages)
    assert len(text) <= 200
    assert text.endswith("- user (last): Now book it.")
    assert "…\n" in text


def test_extractive_drops_middle_lines_rather_than_emptying_all() -> None:
    """With too many lines for the limit, the oldest and the latest are kept, readable."""
    messages: list[Message] = [Message.user("first question")]
    for i in range(30):
        messages += [
            Message.assistant("", tool_calls=[ToolCall(id=f"c{i}", name="f")]),
            Message.tool(f"result {i}", tool_call_id=f"c{i}"),
        ]
    messages += [Message.assistant("done"), Message.user("last question")]
    text = ExtractiveSummarizer(max_chars=120).summarize(messages)
    assert len(text) <= 120
    assert "- user (first): first question" in text
    assert text.endswith("- user (last): last question")


@settings(deadline=None, max_examples=150)
@given(
    texts=st.lists(st.text(min_size=0, max_size=300), min_size=0, max_size=8),
    max_chars=st.integers(min_value=21, max_value=400),
)
def test_extractive_length_and_prefix_hold_for_any_text(texts: list[str], max_chars: int) -> None:
    """For any user texts, the summary starts with the prefix and fits max_chars."""
    messages: list[Message] = []
    for text in texts:
        messages += [Message.user(text), Message.assistant("ok")]
    summary = ExtractiveSummarizer(max_chars=max_chars).summarize(messages)
    assert summary.startswith(PREFIX)
    assert len(summary) <= max_chars


def test_extractive_keeps_an_earlier_summary_without_its_system_prompt() -> None:
    """A summary of a summary keeps the old facts once, under one prefix, without the prompt."""
    first = ExtractiveSummarizer().summarize(conversation())
    messages = [
        earlier_summary(first),
        Message.user("Also a hotel near the Louvre."),
        Message.assistant("Done: Hotel du Louvre, 3 nights."),
    ]
    text = ExtractiveSummarizer().summarize(messages)
    assert text == (
        "Previously:\n"
        "- user (first): Book a flight to Paris for Alice on 2026-03-14.\n"
        "- tool search_flights: AF123 departs 09:40, 420 EUR\n"
        "- user (last): Yes, book AF123.\n"
        "- tool book_flight: booking ref XK7Q\n"
        "- user: Also a hotel near the Louvre."
    )
    assert text.count(PREFIX) == 1
    assert "travel agent" not in text


def test_extractive_skips_an_earlier_empty_summary() -> None:
    """An earlier "(nothing)" summary adds nothing to the next one."""
    messages = [earlier_summary("Previously: (nothing)"), Message.user("hello")]
    assert ExtractiveSummarizer().summarize(messages) == "Previously:\n- user: hello"


def test_extractive_of_nothing_is_a_short_text() -> None:
    """Empty input, or input with nothing to keep, gives "Previously: (nothing)"."""
    summarizer = ExtractiveSummarizer()
    assert summarizer.summarize([]) == "Previously: (nothing)"
    only_prompt = [Message.system("be nice"), Message.user("   "), Message.assistant("hi")]
    assert summarizer.summarize(only_prompt) == "Previously: (nothing)"


def test_extractive_is_deterministic() -> None:
    """The same contents give the same text, whatever the message ids and timestamps."""
    one, two = conversation(), conversation()
    assert [m.id for m in one] != [m.id for m in two]
    assert ExtractiveSummarizer().summarize(one) == ExtractiveSummarizer().summarize(two)
    assert ExtractiveSummarizer().summarize(one) == ExtractiveSummarizer().summarize(one)


@pytest.mark.parametrize(
    ("max_chars", "error"), [(20, ValueError), (0, ValueError), (True, TypeError)]
)
def test_extractive_refuses_a_useless_limit(max_chars: int, error: type[Exception]) -> None:
    """A limit too short for "Previously: (nothing)", or not an int, is refused."""
    with pytest.raises(error, match="max_chars"):
        ExtractiveSummarizer(max_chars=max_chars)


def test_extractive_fits_the_protocol() -> None:
    """The extractive summarizer is a Summarizer."""
    assert isinstance(ExtractiveSummarizer(), Summarizer)


class SyncOnly:
    """A minimal summarizer of its own."""

    def summarize(
        self, messages: Sequence[Message], *, context: CompactionContext | None = None
    ) -> str:
        return f"{len(messages)} messages"


class AsyncOnly:
    """A summarizer with only the async method."""

    async def asummarize(self, messages: Sequence[Message]) -> str:
        return f"async {len(messages)}"


def test_resolve_refuses_an_object_with_only_an_async_method() -> None:
    """Summarizers are called synchronously: an object with only asummarize is refused."""
    with pytest.raises(TypeError, match="is not a Summarizer: got AsyncOnly"):
        resolve_summarizer(AsyncOnly())  # type: ignore[arg-type]


def test_render_transcript_shows_calls_and_results_without_the_system_prompt() -> None:
    """The transcript has roles, tool calls with arguments and results, earlier summaries."""
    transcript = render_transcript(
        [earlier_summary("Previously:\n- user: old fact"), *conversation()]
    )
    assert transcript.startswith("earlier summary:\n- user: old fact\n\n")
    assert "travel agent" not in transcript
    assert "user: Book a flight to Paris for Alice on 2026-03-14." in transcript
    assert 'assistant calls search_flights({"to": "CDG"}) [c1]' in transcript
    assert "tool result of search_flights [c1]: AF123 departs 09:40, 420 EUR" in transcript
    assert render_transcript([]) == ""


# ---------------------------------------------------------------- resolution

PLUGIN_SOURCE = """
from redis_history.compaction.summarizers import ExtractiveSummarizer


class Shouter:
    def summarize(self, messages, *, context=None):
        return " ".join(m.content.upper() for m in messages)


INSTANCE = Shouter()
NOT_A_SUMMARIZER = 42


class NeedsArgs:
    def __init__(self, loudness):
        self.loudness = loudness

    def summarize(self, messages, *, context=None):
        return ""


class SummarizeIsNotAMethod:
    summarize = "nope"


NOT_CALLABLE = SummarizeIsNotAMethod()


def make():
    return ExtractiveSummarizer(max_chars=100)


def make_with(loudness):
    return Shouter()


def make_wrong():
    return 42
"""

PLUGIN = "rh_test_summarizer_plugins"
BROKEN = "rh_test_summarizer_broken"


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable plugin module (and one that fails on import); both forgotten afterwards."""
    (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    (tmp_path / f"{BROKEN}.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield PLUGIN
    for name in (PLUGIN, BROKEN):
        sys.modules.pop(name, None)


def test_resolve_defaults_to_extractive() -> None:
    """No spec gives an extractive summarizer with the default limit."""
    summarizer = resolve_summarizer(None)
    assert isinstance(summarizer, ExtractiveSummarizer)
    assert summarizer.max_chars == 2000


def test_resolve_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    """ "extractive" and "openai" are aliases; "openai" reads the environment."""
    monkeypatch.setenv("REDIS_HISTORY_SUMMARIZER_MODEL", "my-model")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert sorted(ALIASES) == ["extractive", "openai"]
    assert isinstance(resolve_summarizer("extractive"), ExtractiveSummarizer)
    openai = resolve_summarizer("openai")
    assert isinstance(openai, OpenAICompatibleSummarizer)
    assert openai.model == "my-model"


def test_resolve_returns_a_summarizer_object_as_is() -> None:
    """An object with a summarize method is returned unchanged."""
    summarizer = SyncOnly()
    assert resolve_summarizer(summarizer) is summarizer


def test_resolve_instantiates_a_class() -> None:
    """A summarizer class is called without arguments."""
    assert isinstance(resolve_summarizer(SyncOnly), SyncOnly)  # type: ignore[arg-type]


@pytest.mark.parametrize("separator", [":", "."])
@pytest.mark.parametrize(
    ("attr", "kind"),
    [("INSTANCE", "Shouter"), ("Shouter", "Shouter"), ("make", "ExtractiveSummarizer")],
)
def test_resolve_imports_dotted_paths(plugins: str, separator: str, attr: str, kind: str) -> None:
    """An instance, a class or a factory is found by 'module:attr' and 'module.attr' alike."""
    summarizer = resolve_summarizer(f"{plugins}{separator}{attr}")
    assert type(summarizer).__name__ == kind
    if attr == "INSTANCE":
        assert summarizer is sys.modules[plugins].INSTANCE


def test_resolve_path_to_a_classmethod_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the colon a dotted attribute such as Class.factory is allowed."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    spec = "redis_history.compaction.summarizers:OpenAICompatibleSummarizer.from_env"
    assert isinstance(resolve_summarizer(spec), OpenAICompatibleSummarizer)
    assert isinstance(
        resolve_summarizer("redis_history.compaction.summarizers.ExtractiveSummarizer"),
        ExtractiveSummarizer,
    )


@pytest.mark.parametrize(
    ("spec", "error", "fragment"),
    [
        ("no_such_module_for_rh:thing", ValueError, "cannot import 'no_such_module_for_rh'"),
        ("no_such_module_for_rh.thing", ValueError, "cannot import 'no_such_module_for_rh'"),
        (f"{BROKEN}:thing", ValueError, "boom at import"),
        (f"{PLUGIN}:missing", ValueError, "has no attribute 'missing'"),
        (f"{PLUGIN}.missing", ValueError, "has no attribute 'missing'"),
        (f"{PLUGIN}:NOT_A_SUMMARIZER", TypeError, "is not a Summarizer: got int"),
        (f"{PLUGIN}:NOT_CALLABLE", TypeError, "is not a Summarizer"),
        (f"{PLUGIN}:make_wrong", TypeError, "returned is not a Summarizer"),
        (f"{PLUGIN}:make_with", TypeError, "cannot be called without arguments"),
        (f"{PLUGIN}:NeedsArgs", TypeError, "cannot be called without arguments"),
        ("bogus", ValueError, "unknown summarizer 'bogus'"),
        ("not a path:x y", ValueError, "unknown summarizer"),
        (f"{PLUGIN}:", ValueError, "unknown summarizer"),
    ],
)
def test_resolve_refuses_what_does_not_fit(
    plugins: str, spec: str, error: type[Exception], fragment: str
) -> None:
    """Each wrong spec is a clear TypeError or ValueError naming what was given."""
    with pytest.raises(error) as caught:
        resolve_summarizer(spec)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("spec", [42, object(), b"extractive", ["extractive"]])
def test_resolve_refuses_a_non_string_non_summarizer(spec: object) -> None:
    """An object without summarize is a TypeError that says what is expected."""
    with pytest.raises(TypeError, match=r"is not a Summarizer: got .*expected a Summarizer"):
        resolve_summarizer(spec)  # type: ignore[arg-type]


# ---------------------------------------------------------------- OpenAI-compatible client


@pytest.fixture
def server(chat_server: ChatServer) -> ChatServer:
    """The chat-completions server of this test."""
    return chat_server


@pytest.fixture
def sleeps() -> list[float]:
    """The backoff delays a client asked for; nothing really sleeps."""
    return []


def client(server: ChatServer, sleeps: list[float], **options: Any) -> OpenAICompatibleSummarizer:
    """A summarizer on the test server whose backoff only records its delays."""
    options = {"api_key": SECRET, "model": "test-model", "timeout": 5.0, **options}
    return OpenAICompatibleSummarizer(base_url=server.url, sleep=sleeps.append, **options)


def test_openai_request_has_the_chat_completions_shape(
    server: ChatServer, sleeps: list[float]
) -> None:
    """One POST to /chat/completions with the bearer key, the model and the transcript."""
    summary = client(server, sleeps, max_tokens=300, temperature=0.0).summarize(conversation())
    assert summary == "Previously:\n- Alice flies AF123 to Paris."
    [seen] = server.requests
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["Authorization"] == f"Bearer {SECRET}"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.body["model"] == "test-model"
    assert seen.body["max_tokens"] == 300
    assert seen.body["temperature"] == 0.0
    system, user = seen.body["messages"]
    assert system == {"role": "system", "content": DEFAULT_PROMPT}
    assert user["role"] == "user"
    assert user["content"] == "Conversation to summarize:\n\n" + render_transcript(conversation())
    assert "Book a flight to Paris for Alice" in user["content"]
    assert "search_flights" in user["content"]
    assert sleeps == []


def test_openai_without_a_key_sends_no_authorization(
    server: ChatServer, sleeps: list[float]
) -> None:
    """An empty key sends no Authorization header; None options are left out of the body."""
    summarizer = client(
        server, sleeps, api_key="", max_tokens=None, temperature=None, prompt="Sum up."
    )
    summarizer.summarize([Message.user("hi")])
    [seen] = server.requests
    assert "Authorization" not in seen.headers
    assert "max_tokens" not in seen.body
    assert "temperature" not in seen.body
    assert seen.body["messages"][0] == {"role": "system", "content": "Sum up."}


def test_openai_keeps_a_reply_that_already_has_the_prefix(
    server: ChatServer, sleeps: list[float]
) -> None:
    """A reply already starting with "Previously:" is not prefixed twice."""
    server.default = Reply(body=completion("  Previously: Alice booked AF123.\n"))
    assert client(server, sleeps).summarize(conversation()) == "Previously: Alice booked AF123."


def test_openai_retries_a_server_error_then_succeeds(
    server: ChatServer, sleeps: list[float]
) -> None:
    """HTTP 500 twice, then 200: three requests, doubling backoff, the summary returned."""
    server.replies = [Reply(500, {"error": "busy"}), Reply(503, b"unavailable")]
    summary = client(server, sleeps, max_retries=2, backoff=0.5).summarize(conversation())
    assert summary.startswith(PREFIX)
    assert len(server.requests) == 3
    assert sleeps == [0.5, 1.0]


def test_openai_honours_retry_after_up_to_max_backoff(
    server: ChatServer, sleeps: list[float]
) -> None:
    """A 429's numeric Retry-After sets the delay, capped by max_backoff."""
    server.replies = [
        Reply(429, {"error": "slow down"}, headers={"Retry-After": "3"}),
        Reply(429, {"error": "slow down"}, headers={"Retry-After": "120"}),
    ]
    client(server, sleeps, max_retries=2, max_backoff=8.0).summarize(conversation())
    assert len(server.requests) == 3
    assert sleeps == [3.0, 8.0]


def test_openai_gives_up_after_max_retries(server: ChatServer, sleeps: list[float]) -> None:
    """A server that always fails gets max_retries + 1 requests, then a SummarizerError."""
    server.default = Reply(500, {"error": {"message": "internal"}})
    summarizer = client(server, sleeps, max_retries=3)
    with pytest.raises(SummarizerError) as caught:
        summarizer.summarize(conversation())
    assert len(server.requests) == 4
    assert len(sleeps) == 3
    error = caught.value
    assert isinstance(error, HistoryError)
    assert (error.status, error.attempts) == (500, 4)
    assert error.endpoint == f"{server.url}/chat/completions"
    assert "HTTP 500" in str(error)
    assert "after 4 attempts" in str(error)
    assert f"{server.url}/chat/completions" in str(error)
    assert error.__cause__ is not None


def test_openai_does_not_retry_a_client_error(server: ChatServer, sleeps: list[float]) -> None:
    """HTTP 400 fails at once, quoting the server's explanation."""
    server.default = Reply(400, {"error": {"message": "model 'x' does not exist"}})
    with pytest.raises(SummarizerError, match=r"HTTP 400 .*does not exist") as caught:
        client(server, sleeps, max_retries=3).summarize(conversation())
    assert len(server.requests) == 1
    assert sleeps == []
    assert (caught.value.status, caught.value.attempts) == (400, 1)


def test_openai_times_out(server: ChatServer, sleeps: list[float]) -> None:
    """A server slower than the client's timeout gives a SummarizerError after the retries."""
    server.default = Reply(delay=10.0)
    with pytest.raises(SummarizerError, match=r"timed out after 0\.2 s") as caught:
        client(server, sleeps, timeout=0.2, max_retries=1).summarize(conversation())
    assert len(server.requests) == 2
    assert len(sleeps) == 1
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, OSError)


def test_openai_retries_connection_errors(sleeps: list[float]) -> None:
    """Nothing listening on the port: every attempt fails to connect, then SummarizerError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    summarizer = OpenAICompatibleSummarizer(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=SECRET, max_retries=2, sleep=sleeps.append
    )
    with pytest.raises(SummarizerError, match="cannot connect") as caught:
        summarizer.summarize(conversation())
    assert caught.value.attempts == 3
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"<html>Bad gateway</html>", "is not JSON"),
        (b"", "is not JSON"),
        (b"[" * 100_000, "nests deeper than MAX_NESTING"),
        (b'{"choices": ' + b"[" * 150 + b"]" * 150 + b"}", "nests deeper than MAX_NESTING"),
        ({"object": "chat.completion"}, "has no choices[0].message.content"),
        ({"choices": []}, "has no choices[0].message.content"),
        ({"choices": [{"text": "legacy"}]}, "has no choices[0].message.content"),
        (["not", "an", "object"], "has no choices[0].message.content"),
        (completion(""), "empty or non-text summary"),
        (completion("   "), "empty or non-text summary"),
        (completion(None), "empty or non-text summary"),
        (completion([{"type": "text", "text": "parts"}]), "empty or non-text summary"),
    ],
    ids=[
        "html",
        "empty",
        "deep",
        "deep-within-the-parser",
        "no-choices",
        "empty-choices",
        "no-message",
        "list",
        "blank",
        "spaces",
        "null",
        "parts",
    ],
)
def test_openai_refuses_a_malformed_reply(
    server: ChatServer, sleeps: list[float], body: Any, fragment: str
) -> None:
    """A 200 whose body is not a usable completion is a SummarizerError, not retried."""
    server.default = Reply(200, body)
    with pytest.raises(SummarizerError) as caught:
        client(server, sleeps, max_retries=2).summarize(conversation())
    assert fragment in str(caught.value)
    assert len(server.requests) == 1
    assert caught.value.attempts == 1


def test_the_api_key_never_shows(server: ChatServer, sleeps: list[float]) -> None:
    """Neither repr nor an error message shows the key, even when the server echoes it."""
    server.default = Reply(401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}})
    summarizer = client(server, sleeps)
    assert SECRET not in repr(summarizer)
    assert "api_key=***" in repr(summarizer)
    with pytest.raises(SummarizerError) as caught:
        summarizer.summarize(conversation())
    assert "HTTP 401" in str(caught.value)
    assert "Incorrect API key provided: ***" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value)
    server.default = Reply(500, {"echo": SECRET})
    with pytest.raises(SummarizerError) as retried:
        client(server, sleeps, max_retries=0).summarize(conversation())
    assert SECRET not in str(retried.value)


ODD_KEY = 'sk-proj/do+not "leak"=éZq9x'
"""A key whose JSON, backslash and URL escapes all differ from it."""
ECHOES = {name: form for name, form in escaped_forms(ODD_KEY).items() if form != ODD_KEY}


@pytest.mark.parametrize("form", ECHOES, ids=list(ECHOES))
def test_an_echoed_key_is_masked_in_every_escaped_form(
    server: ChatServer, sleeps: list[float], form: str
) -> None:
    """A key the endpoint echoes JSON-escaped, backslash-escaped or URL-encoded, in its body and
    in its status line, shows nowhere: not in the error, nor in any error chained to it."""
    echo = ECHOES[form]
    assert echo != ODD_KEY
    latin1 = echo if echo.isascii() else urllib.parse.quote(ODD_KEY)
    body = f'{{"error": {{"message": "Incorrect API key provided: {echo}"}}}}'.encode()
    server.default = Reply(401, body, reason=f"Bad key {latin1}")
    with pytest.raises(SummarizerError) as caught:
        client(server, sleeps, api_key=ODD_KEY).summarize(conversation())
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert str(caught.value).count("***") == 2, "masked in the status line and in the body"
    for leaked in (ODD_KEY, echo, latin1, "Zq9x"):  # "Zq9x": no part of the key either
        assert leaked not in shown


def test_a_missing_key_is_named_on_401(server: ChatServer, sleeps: list[float]) -> None:
    """A 401 without a key says which environment variable to set."""
    server.default = Reply(401, {"error": "no key"})
    with pytest.raises(SummarizerError, match="set MY_KEY_VAR"):
        client(server, sleeps, api_key="", api_key_env="MY_KEY_VAR").summarize([Message.user("x")])


def test_from_env_reads_the_documented_variables(server: ChatServer) -> None:
    """Base URL, model, the key's variable and the timeout come from the environment."""
    environ = {
        "REDIS_HISTORY_SUMMARIZER_BASE_URL": server.url + "/",
        "REDIS_HISTORY_SUMMARIZER_MODEL": "local-llm",
        "REDIS_HISTORY_SUMMARIZER_API_KEY_ENV": "MY_LLM_KEY",
        "REDIS_HISTORY_SUMMARIZER_TIMEOUT": "7.5",
        "MY_LLM_KEY": SECRET,
    }
    summarizer = OpenAICompatibleSummarizer.from_env(environ)
    assert (summarizer.base_url, summarizer.model, summarizer.timeout) == (
        server.url,
        "local-llm",
        7.5,
    )
    summarizer.summarize([Message.user("hi")])
    [seen] = server.requests
    assert seen.headers["Authorization"] == f"Bearer {SECRET}"
    assert seen.body["model"] == "local-llm"


def test_from_env_defaults() -> None:
    """With nothing set: the OpenAI API, gpt-4o-mini, OPENAI_API_KEY, 60 s."""
    summarizer = OpenAICompatibleSummarizer.from_env({"OPENAI_API_KEY": SECRET})
    assert summarizer.endpoint == "https://api.openai.com/v1/chat/completions"
    assert (summarizer.model, summarizer.api_key_env, summarizer.timeout) == (
        "gpt-4o-mini",
        "OPENAI_API_KEY",
        60.0,
    )
    assert SECRET not in repr(summarizer)


def test_the_key_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without api_key, the variable named by api_key_env is read."""
    monkeypatch.setenv("SOME_KEY", SECRET)
    assert "api_key=***" in repr(OpenAICompatibleSummarizer(api_key_env="SOME_KEY"))
    monkeypatch.delenv("SOME_KEY")
    assert "api_key=None" in repr(OpenAICompatibleSummarizer(api_key_env="SOME_KEY"))


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"base_url": "ftp://example.com"}, "http(s) URL"),
        ({"base_url": "localhost:8000"}, "http(s) URL"),
        ({"model": ""}, "model"),
        ({"timeout": 0}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_openai_refuses_bad_settings(options: dict[str, Any], fragment: str) -> None:
    """Bad constructor settings are a ValueError naming the setting."""
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        OpenAICompatibleSummarizer(api_key="", **options)


def test_from_env_refuses_the_openai_api_without_a_key() -> None:
    """Neither a key nor a base URL of its own: refused at once, naming both variables; a
    local server (another base URL) needs no key."""
    message = "set OPENAI_API_KEY, or REDIS_HISTORY_SUMMARIZER_BASE_URL to a server"
    with pytest.raises(ValueError, match=message):
        OpenAICompatibleSummarizer.from_env({})
    with pytest.raises(ValueError, match="set MY_KEY"):
        OpenAICompatibleSummarizer.from_env({"REDIS_HISTORY_SUMMARIZER_API_KEY_ENV": "MY_KEY"})
    local = {"REDIS_HISTORY_SUMMARIZER_BASE_URL": "http://127.0.0.1:8000/v1"}
    assert "api_key=None" in repr(OpenAICompatibleSummarizer.from_env(local))


def test_from_env_refuses_a_bad_timeout() -> None:
    """A timeout that is not a number names the variable."""
    with pytest.raises(ValueError, match="REDIS_HISTORY_SUMMARIZER_TIMEOUT"):
        OpenAICompatibleSummarizer.from_env({"REDIS_HISTORY_SUMMARIZER_TIMEOUT": "soon"})


def test_credentials_in_the_url_are_not_shown() -> None:
    """User-info in base_url is kept out of repr and the endpoint shown in errors."""
    summarizer = OpenAICompatibleSummarizer(
        base_url="https://user:hunter2@llm.example/v1", api_key=""
    )
    assert "hunter2" not in repr(summarizer)
