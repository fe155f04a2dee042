"""Content parts through every wire format: each part a format carries round-trips (render then
parse gives the same message; parse then render gives the same wire dicts), validates as the
SDK's own request type, and each part a format cannot carry is refused with a typed error that
names the part and the format."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_formats import sdk_checked

from redis_history import InvalidMessageError, Message, ToolCall, UnsupportedPartError
from redis_history.context import WIRE_FORMATS, WireFormat, parse, render
from redis_history.parts import AudioPart, ContentPart, FilePart, ImagePart, TextPart, data_url

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + (64).to_bytes(4, "big") * 2 + bytes(range(256))
)  # a 64 x 64 PNG's header, then bytes
PDF = b"%PDF-1.7\n" + b"stream" * 20
WAV = b"RIFF....WAVEfmt "
B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()

CARRIED: dict[WireFormat, list[ContentPart]] = {
    "openai_chat": [
        ImagePart(url="https://example.com/cat.jpg"),
        ImagePart(url="https://example.com/cat.jpg", detail="auto"),
        ImagePart(data=PNG, media_type="image/png", detail="low"),
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
        FilePart(file_id="file-abc123"),
        AudioPart(data=WAV, format="wav"),
        AudioPart(data=b"ID3\x04", format="mp3"),
    ],
    "openai_responses": [
        ImagePart(url="https://example.com/cat.jpg"),
        ImagePart(data=PNG, media_type="image/png", detail="high"),
        ImagePart(file_id="file-img1"),
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
        FilePart(url="https://example.com/report.pdf"),
        FilePart(file_id="file-abc123", filename="report.pdf"),
    ],
    "anthropic": [
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/cat.jpg"),
        ImagePart(file_id="file_011CNha8iCJcU1wXNR6q4V8w"),
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
        FilePart(data="Plain notes: é, 東京.".encode(), media_type="text/plain"),
        FilePart(url="https://example.com/report.pdf"),
        FilePart(file_id="file_011CNha8iCJcU1wXNR6q4V8w"),
    ],
}
"""Each format's parts, in the form that comes back equal (what a format has no field for is
left out: a detail in Anthropic, a media type with a URL or a file id)."""

IN_TOOL_RESULTS: dict[WireFormat, bool] = {
    "openai_chat": False,
    "openai_responses": True,
    "anthropic": True,
}
"""Whether a format's tool results carry more than text."""

CASES = [(format, part) for format in WIRE_FORMATS for part in CARRIED[format]]


def case_id(value: Any) -> str:
    if isinstance(value, str):
        return value
    source = next(name for name in ("data", "url", "file_id") if getattr(value, name, None))
    return f"{value.type}-{source}"


def same(a: Message, b: Message) -> bool:
    """Equal but for the id and the time, which every format drops."""
    return a.model_dump(exclude={"id", "created_at"}) == b.model_dump(exclude={"id", "created_at"})


def turn(part: ContentPart, tools: bool) -> list[Message]:
    """A user message holding ``part`` and, if ``tools``, a tool result holding it too."""
    messages = [Message.user(["Look: ", part, " — what is it?"])]
    if tools:
        messages += [
            Message.assistant("", tool_calls=[ToolCall(id="call_1", name="snap")]),
            Message.tool(["Screen:", part], tool_call_id="call_1"),
        ]
    return messages


@pytest.mark.parametrize(("format", "part"), CASES, ids=case_id)
def test_each_part_a_format_carries_round_trips(format: WireFormat, part: ContentPart) -> None:
    """render then parse gives the same messages; parse then render the same request; the
    request is what the SDK's create() takes."""
    messages = turn(part, IN_TOOL_RESULTS[format])
    request = render(messages, format)
    back = parse(request, format)
    assert len(back) == len(messages)
    assert all(same(a, b) for a, b in zip(back, messages, strict=True)), back
    assert render(back, format) == request
    sdk_checked(request, format)


NOT_CARRIED: list[tuple[WireFormat, ContentPart, str]] = [
    ("openai_chat", FilePart(url="https://example.com/r.pdf"), "file part given by URL"),
    ("openai_chat", ImagePart(file_id="file-img1"), "image part given by file_id"),
    ("openai_responses", AudioPart(data=WAV, format="wav"), "takes no audio input"),
    ("anthropic", AudioPart(data=WAV, format="wav"), "takes no audio input"),
    ("anthropic", ImagePart(data=b"BM..", media_type="image/bmp"), "JPEG, PNG, GIF or WebP"),
    ("anthropic", FilePart(data=b"a,b\n", media_type="text/csv"), "PDF or plain text"),
    ("anthropic", FilePart(data=b"\xff\xfe", media_type="text/plain"), "is UTF-8"),
    (
        "anthropic",
        FilePart(url="https://example.com/page", media_type="text/html"),
        "given by URL is a PDF",
    ),
]


@pytest.mark.parametrize(("format", "part", "why"), NOT_CARRIED, ids=case_id)
def test_a_part_a_format_cannot_carry_is_refused_by_name(
    format: WireFormat, part: ContentPart, why: str
) -> None:
    """UnsupportedPartError (an InvalidMessageError) names the part, the format and the message;
    nothing is dropped silently."""
    messages = [Message.system("s"), Message.user(["Look:", part])]
    with pytest.raises(UnsupportedPartError, match=why) as caught:
        render(messages, format)
    error = caught.value
    assert isinstance(error, InvalidMessageError)
    assert (error.part, error.format, error.index) == (part.type, format, 1)
    assert format in str(error)
    assert str(error).startswith("message 1 (user)")


def test_a_chat_tool_result_carries_text_only() -> None:
    """Chat completions' tool messages hold text parts only: an image there is refused, in
    render, ``to_openai`` and the store's ``snapshot_openai`` alike (one rendering)."""
    screenshot = Message.tool(["page", ImagePart(url="https://x/s.png")], tool_call_id="c1")
    with pytest.raises(UnsupportedPartError, match="tool result holds text only") as caught:
        render([screenshot], "openai_chat")
    assert (caught.value.part, caught.value.format) == ("image", "openai_chat")
    with pytest.raises(UnsupportedPartError):
        screenshot.to_openai()
    texts = Message(role="tool", parts=(TextPart(text="a"), TextPart(text="b")), tool_call_id="c")
    assert texts.to_openai()["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]


# --- real request shapes ------------------------------------------------------------------

RESPONSES_INPUT: list[dict[str, Any]] = [
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this image, and this report?"},
            {"type": "input_image", "image_url": data_url(PNG, "image/png"), "detail": "auto"},
            {
                "type": "input_file",
                "filename": "report.pdf",
                "file_data": f"data:application/pdf;base64,{B64_PDF}",
            },
        ],
    },
    {
        "type": "function_call",
        "call_id": "call_shot",
        "name": "screenshot",
        "arguments": "{}",
    },
    {
        "type": "function_call_output",
        "call_id": "call_shot",
        "output": [
            {"type": "input_text", "text": "The page:"},
            {"type": "input_image", "image_url": "https://example.com/s.png", "detail": "low"},
        ],
    },
]

ANTHROPIC_REQUEST: dict[str, Any] = {
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG},
                },
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": B64_PDF},
                    "title": "report.pdf",
                },
                {"type": "text", "text": "Summarize both."},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "https://example.com/s.png"},
                        },
                        {"type": "text", "text": "the page"},
                    ],
                }
            ],
        },
    ]
}


def test_a_responses_request_with_an_image_a_file_and_a_tool_screenshot() -> None:
    """Responses input: a data-URL image (detail auto reads as none), an inline PDF and a
    function output with an image parse to parts and render back as they came."""
    user, call, result = parse(RESPONSES_INPUT, "openai_responses")
    assert user.parts == (
        TextPart(text="What is in this image, and this report?"),
        ImagePart(data=PNG, media_type="image/png"),
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
    )
    assert [c.id for c in call.tool_calls] == ["call_shot"]
    assert result.parts == (
        TextPart(text="The page:"),
        ImagePart(url="https://example.com/s.png", detail="low"),
    )
    assert render([user, call, result], "openai_responses")["input"] == RESPONSES_INPUT
    sdk_checked({"input": RESPONSES_INPUT}, "openai_responses")


def test_an_anthropic_request_with_an_image_a_document_and_a_tool_screenshot() -> None:
    """Anthropic: base64 image and PDF document (its title the file name) in a user turn, and
    an image in a tool_result, parse to parts and render back as they came."""
    user, _, result = parse(ANTHROPIC_REQUEST, "anthropic")
    assert user.parts == (
        ImagePart(data=PNG, media_type="image/png"),
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
        TextPart(text="Summarize both."),
    )
    assert user.text == "Summarize both."
    assert result.tool_call_id == "toolu_1"
    assert result.parts == (ImagePart(url="https://example.com/s.png"), TextPart(text="the page"))
    assert render(parse(ANTHROPIC_REQUEST, "anthropic"), "anthropic") == ANTHROPIC_REQUEST
    sdk_checked(ANTHROPIC_REQUEST, "anthropic")


def test_all_text_content_parses_as_text_and_mixed_content_as_parts() -> None:
    """Parsing keeps all-text content as ``content`` in every format, and content with any
    other part as ``parts``."""
    texts = {
        "openai_chat": [{"role": "user", "content": [{"type": "text", "text": "a"}]}],
        "openai_responses": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]}],
        "anthropic": [{"role": "user", "content": [{"type": "text", "text": "a"}]}],
    }
    for format, request in texts.items():
        (message,) = parse(request, format)  # type: ignore[arg-type]
        assert (message.content, message.parts) == ("a", ()), format
    for format in WIRE_FORMATS:
        rendered = render([Message.user(["a", ImagePart(url="https://x/y.png")])], format)
        (message,) = parse(rendered, format)
        assert (message.content, message.text, len(message.parts)) == ("", "a", 2), format


def test_one_image_turn_reaches_every_model_api() -> None:
    """An image turn parsed from one API renders for the other two, to what their SDKs take."""
    (asked, *_) = parse(ANTHROPIC_REQUEST, "anthropic")
    chat = render([asked], "openai_chat")
    assert chat["messages"][0]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": data_url(PNG, "image/png")},
    }
    responses = render([asked], "openai_responses")
    assert responses["input"][0]["content"][1] == {
        "type": "input_file",
        "file_data": data_url(PDF, "application/pdf"),
        "filename": "report.pdf",
    }
    for format, request in (("openai_chat", chat), ("openai_responses", responses)):
        sdk_checked(request, format)  # type: ignore[arg-type]
        (back,) = parse(request, format)  # type: ignore[arg-type]
        assert same(back, asked)


def test_parts_that_cannot_be_read_raise_a_typed_error() -> None:
    """A part with bad base64, no source, or an unknown detail is an InvalidMessageError
    naming the format."""
    bad = [
        ("anthropic", [{"type": "image", "source": {"type": "url"}}], "ImagePart from anthropic"),
        (
            "anthropic",
            [{"type": "document", "source": {"type": "base64", "data": "@"}}],
            "not base64",
        ),
        ("openai_responses", [{"type": "input_image", "detail": "auto"}], "ImagePart from"),
        (
            "openai_responses",
            [{"type": "input_image", "image_url": "https://x/y.png", "detail": "original"}],
            "openai_responses",
        ),
        ("openai_responses", [{"type": "input_file", "file_data": B64_PDF}], "media_type"),
    ]
    for format, content, match in bad:
        with pytest.raises(InvalidMessageError, match=match):
            parse([{"role": "user", "content": content}], format)  # type: ignore[arg-type]
    # a bare base64 file_data takes its media type from its file name
    named = {"type": "input_file", "file_data": B64_PDF, "filename": "r.pdf"}
    (message,) = parse([{"role": "user", "content": [named]}], "openai_responses")
    assert message.parts[0] == FilePart(data=PDF, media_type="application/pdf", filename="r.pdf")


@st.composite
def conversations_with_parts(draw: st.DrawFn, format: WireFormat) -> list[Message]:
    """Turns whose user messages (and tool results, where the format carries more than text)
    mix text with the parts ``format`` carries, in any order."""
    content = st.lists(st.text(max_size=8) | st.sampled_from(CARRIED[format]), max_size=4)
    out: list[Message] = []
    for turn_index in range(draw(st.integers(1, 3))):
        out.append(Message.user(draw(content)))
        if draw(st.booleans()):
            call = ToolCall(id=f"call_{turn_index}", name="look")
            out.append(Message.assistant(draw(st.text(max_size=8)), tool_calls=[call]))
            result = draw(content) if IN_TOOL_RESULTS[format] else draw(st.text(max_size=8))
            out.append(Message.tool(result, tool_call_id=call.id))
        out.append(Message.assistant(draw(st.text(max_size=8))))
    return out


@pytest.mark.parametrize("format", WIRE_FORMATS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_mix_of_carried_parts_round_trips(format: WireFormat, data: st.DataObject) -> None:
    """For any history of text and the parts a format carries: parse(render(m)) == m, and the
    request is the SDK's create() parameters."""
    messages = data.draw(conversations_with_parts(format))
    request = render(messages, format)
    back = parse(request, format)
    assert [m.model_dump(exclude={"id", "created_at"}) for m in back] == [
        m.model_dump(exclude={"id", "created_at"}) for m in messages
    ]
    sdk_checked(request, format)
