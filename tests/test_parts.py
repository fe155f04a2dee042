"""Content parts: what a message may hold besides text, how it is checked, stored and read
back, and rendered in the chat-completions format."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
import redis
from PIL import Image
from pydantic import ValidationError

from redis_history import (
    InvalidMediaError,
    InvalidMessageError,
    Message,
    RedisHistory,
    UnsupportedPartError,
)
from redis_history.context import request_tokens
from redis_history.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    TextPart,
    data_url,
    from_openai_chat,
    stand_in,
    to_openai_chat,
)
from redis_history.tokens import TiktokenCounter, message_tokens


def png(width: int, height: int) -> bytes:
    """A real PNG of ``width`` x ``height`` pixels."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


PNG = png(48, 32)
PDF = b"%PDF-1.7\n" + b"stream" * 100


def every_part() -> list[Any]:
    return [
        TextPart(text="Compare these:"),
        ImagePart(data=PNG, media_type="image/png", detail="low"),
        ImagePart(url="https://example.com/cat.jpg"),
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
        FilePart(file_id="file-abc123"),
        AudioPart(data=b"RIFF....WAVEfmt ", format="wav"),
    ]


def test_a_part_needs_exactly_one_source_and_a_media_type_inline() -> None:
    with pytest.raises(ValidationError, match="exactly one of data or url"):
        ImagePart()
    with pytest.raises(ValidationError, match="exactly one of data or url"):
        ImagePart(data=PNG, media_type="image/png", url="https://x/y.png")
    with pytest.raises(ValidationError, match="needs a media_type"):
        ImagePart(data=PNG)
    with pytest.raises(ValidationError, match="exactly one of data, url or file_id"):
        FilePart(file_id="f", url="https://x/y.pdf")
    with pytest.raises(ValidationError, match="inline data must be bytes"):
        ImagePart(data="iVBOR", media_type="image/png")
    with pytest.raises(ValidationError):
        ImagePart(data=PNG, media_type="png")  # not a media type
    with pytest.raises(ValidationError):
        AudioPart(data=b"x", format="ogg")


def test_a_data_url_is_made_inline() -> None:
    part = ImagePart(url=data_url(PNG, "image/png"))
    assert (part.data, part.media_type, part.url) == (PNG, "image/png", None)
    with pytest.raises(ValidationError, match="data: URL"):
        ImagePart(url="data:,hello")
    with pytest.raises(ValidationError, match="not base64"):
        ImagePart(url="data:image/png;base64,@@@")


def test_a_message_holds_content_or_parts_and_only_users_and_tools_hold_media() -> None:
    message = Message.user(["What is this?", ImagePart(data=PNG, media_type="image/png")])
    assert message.content == ""
    assert message.text == "What is this?"
    assert message.readable == f"What is this? [image: image/png, {len(PNG)} B]"
    assert Message.user(["a", TextPart(text="b")]).content == "ab"  # text alone stays text
    screenshot = Message.tool(["page", ImagePart(url="https://x/s.png")], tool_call_id="c1")
    assert screenshot.parts[1].type == "image"
    with pytest.raises(ValidationError, match="content or parts, not both"):
        Message(role="user", content="hi", parts=(ImagePart(url="https://x/y.png"),))
    with pytest.raises(ValidationError, match="text only"):
        Message(role="assistant", parts=(ImagePart(url="https://x/y.png"),))
    with pytest.raises(ValidationError, match="text only"):
        Message(role="system", parts=(FilePart(file_id="f"),))
    assert Message(role="assistant", parts=(TextPart(text="a"), TextPart(text="b"))).text == "ab"


@pytest.mark.parametrize("part", every_part(), ids=lambda p: p.type)
def test_each_part_round_trips_through_the_chat_format(part: Any) -> None:
    assert from_openai_chat(to_openai_chat(part)) == part


def test_the_chat_format_names_what_it_cannot_carry() -> None:
    with pytest.raises(InvalidMessageError, match="file part given by URL"):
        to_openai_chat(FilePart(url="https://x/y.pdf"))
    with pytest.raises(InvalidMessageError, match="'input_image' is not supported"):
        from_openai_chat({"type": "input_image", "image_url": "https://x/y.png"})
    with pytest.raises(InvalidMessageError, match="not base64"):
        from_openai_chat({"type": "input_audio", "input_audio": {"data": "@", "format": "wav"}})


def test_chat_rendering_sends_inline_bytes_as_data_urls() -> None:
    message = Message.user(every_part())
    rendered = message.to_openai()
    image = rendered["content"][1]["image_url"]
    assert image == {
        "url": "data:image/png;base64," + base64.b64encode(PNG).decode(),
        "detail": "low",
    }
    assert rendered["content"][3]["file"]["filename"] == "report.pdf"
    assert Message.from_openai(rendered, id=message.id, created_at=message.created_at) == message


def test_parts_are_stored_and_read_back_equal(client: redis.Redis) -> None:
    history = RedisHistory(client, "conv-parts")
    message = Message.user(every_part())
    history.append(message)
    history.append(Message.assistant("Two images, a report, a sound."))
    assert history.snapshot()[0] == message
    assert history.snapshot_openai()[0] == message.to_openai()
    (raw, _) = client.lrange(history.keys.msgs, 0, -1)
    assert b'"type":"image"' in raw  # every part says what it is, though a default


def test_a_lone_surrogate_in_a_part_is_refused_before_anything_is_sent(
    client: redis.Redis,
) -> None:
    history = RedisHistory(client, "conv-bad")
    bad = Message.user(["ok", TextPart(text="bad \ud800"), ImagePart(url="https://x/y.png")])
    with pytest.raises(InvalidMessageError, match=r"parts\[1\]\.text holds a lone surrogate"):
        history.append(bad)
    assert client.keys("*") == []


def test_text_parts_are_priced() -> None:
    exact = TiktokenCounter("o200k_base")
    text = "Describe the chart in three sentences."
    plain = message_tokens(Message.user(text), exact)
    parted = message_tokens(Message(role="user", parts=(TextPart(text=text),)), exact)
    assert parted == plain


@pytest.mark.parametrize(
    ("size", "detail", "openai", "anthropic"),
    [
        # OpenAI's vision guide: 1024 x 1024 high is 765, low 85; 2048 x 4096 high 1105.
        ((1024, 1024), "high", 765, 37 * 37),
        ((1024, 1024), "low", 85, 37 * 37),
        ((2048, 4096), "high", 1105, 1568),  # Anthropic: scaled to the 1,568-token cap
        # Anthropic's vision page: one token per 28-px patch (200 x 200: 8 x 8).
        ((200, 200), None, 255, 64),
    ],
)
def test_images_are_priced_as_each_provider_bills_them(
    size: tuple[int, int], detail: Any, openai: int, anthropic: int
) -> None:
    """A message's image costs what OpenAI's formula gives in the chat format (the store's
    count) and Anthropic's in the Anthropic format, its size read from the PNG's header."""
    exact = TiktokenCounter("o200k_base")
    text = Message.user("What is this?")
    image = ImagePart(data=png(*size), media_type="image/png", detail=detail)
    message = Message.user(["What is this?", image])
    assert message_tokens(message, exact) - message_tokens(text, exact) == openai
    assert request_tokens([message], "anthropic") - request_tokens([text], "anthropic") == anthropic


def test_an_image_by_url_is_priced_at_the_most_an_image_costs() -> None:
    exact = TiktokenCounter("o200k_base")
    text = message_tokens(Message.user("x"), exact)
    by_url = Message.user(["x", ImagePart(url="https://example.com/a.png")])
    low = Message.user(["x", ImagePart(url="https://example.com/a.png", detail="low")])
    assert message_tokens(by_url, exact) - text == 1445
    assert message_tokens(low, exact) - text == 85


def test_an_image_that_is_not_one_is_refused_before_anything_is_sent(client: redis.Redis) -> None:
    history = RedisHistory(client, "conv-bad-image")
    fake = Message.user(["see", ImagePart(data=b"not an image at all", media_type="image/png")])
    with pytest.raises(InvalidMediaError):
        history.append(fake)
    assert client.keys("*") == []


def test_an_image_may_be_a_providers_file(client: redis.Redis) -> None:
    """An image given by a provider's file id is stored and read back; chat completions, whose
    ``image_url`` takes a URL, refuses it by name."""
    part = ImagePart(file_id="file-img1", detail="high")
    assert stand_in(part) == "[image: file-img1]"
    with pytest.raises(ValidationError, match="exactly one of data or url, or a file_id"):
        ImagePart(file_id="file-img1", url="https://x/y.png")
    with pytest.raises(UnsupportedPartError, match="image part given by file_id") as caught:
        to_openai_chat(part)
    assert (caught.value.part, caught.value.format) == ("image", "openai_chat")
    history = RedisHistory(client, "conv-file-image")
    message = Message.user(["What is this?", part])
    history.append(message)
    assert history.snapshot() == [message]
