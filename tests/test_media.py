"""Media: types from magic bytes, image sizes read from the headers of real files Pillow
writes, the typed error for anything else, and image prices against the providers' examples."""

from __future__ import annotations

import base64
import io
import math
import re
import wave
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from PIL import Image
from pydantic import ValidationError

from redis_history import HistoryError, InvalidMediaError, InvalidMessageError, Message, media
from redis_history.context import formats
from redis_history.media import (
    anthropic_image_tokens,
    image_size,
    media_type_of,
    openai_image_tokens,
)
from redis_history.parts import AudioPart, FilePart, ImagePart, data_url, from_openai_chat

OPENAI_GUIDE = "https://platform.openai.com/docs/guides/images-vision#calculating-costs"
CLAUDE_VISION = "https://platform.claude.com/docs/en/build-with-claude/vision"
CLAUDE_COORDINATES = "https://platform.claude.com/docs/en/build-with-claude/vision-coordinates"


def encoded(size: tuple[int, int], fmt: str, mode: str = "RGB", **options: Any) -> bytes:
    """A real image file of ``size`` as Pillow writes it."""
    out = io.BytesIO()
    Image.new(mode, size, "white" if mode != "P" else 1).save(out, fmt, **options)
    return out.getvalue()


def orientation(value: int) -> Image.Exif:
    """EXIF holding only an orientation tag."""
    exif = Image.Exif()
    exif[0x0112] = value
    return exif


VARIANTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "png-rgb": ("PNG", "RGB", {}),
    "png-rgba": ("PNG", "RGBA", {}),
    "png-palette": ("PNG", "P", {}),
    "png-1bit": ("PNG", "1", {}),
    "png-16bit": ("PNG", "I;16", {}),
    "jpeg-baseline": ("JPEG", "RGB", {}),
    "jpeg-progressive": ("JPEG", "RGB", {"progressive": True}),
    "jpeg-optimized": ("JPEG", "RGB", {"optimize": True, "quality": 95, "subsampling": 0}),
    "jpeg-gray": ("JPEG", "L", {}),
    "jpeg-cmyk": ("JPEG", "CMYK", {}),
    "jpeg-exif-icc": ("JPEG", "RGB", {"exif": orientation(6), "icc_profile": bytes(200_000)}),
    "gif-palette": ("GIF", "P", {}),
    "gif-rgb": ("GIF", "RGB", {}),
    "webp-lossy": ("WEBP", "RGB", {}),
    "webp-lossless": ("WEBP", "RGB", {"lossless": True}),
    "webp-alpha": ("WEBP", "RGBA", {}),
    "webp-exif": ("WEBP", "RGB", {"exif": orientation(3)}),
}
"""Each way of writing the four formats the sizes are read from: the WebP ones are VP8,
VP8L, and the extended VP8X (alpha, EXIF); the JPEG ones baseline, progressive (SOF2),
grayscale, CMYK (an Adobe APP14 first) and one whose frame header follows EXIF and ICC
segments."""

SIZES = [(1, 1), (2, 3), (3, 2), (17, 9), (640, 480), (1023, 1025), (4000, 3000), (5000, 7)]
SIZES += [(7, 5000)]

MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif"}
MEDIA_TYPES["WEBP"] = "image/webp"


@pytest.mark.parametrize("size", SIZES, ids=lambda size: "x".join(map(str, size)))
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_size_of_a_real_image_is_read_from_its_header(
    variant: str, size: tuple[int, int]
) -> None:
    """Every format, mode and option gives the image's width and height, from 1x1 to
    4000x3000 and 5000 px wide or tall, and its type from the first bytes."""
    fmt, mode, options = VARIANTS[variant]
    data = encoded(size, fmt, mode, **options)
    assert image_size(data) == size
    assert image_size(bytearray(data)) == size
    assert image_size(memoryview(data)) == size
    assert media_type_of(data) == MEDIA_TYPES[fmt]


def test_the_webp_header_kinds_are_all_covered() -> None:
    """The WebP variants above write each of the three first chunks the reader knows."""
    chunks = {
        encoded((5, 4), *VARIANTS[v][:2], **VARIANTS[v][2])[12:16]
        for v in VARIANTS
        if v.startswith("webp")
    }
    assert chunks == {b"VP8 ", b"VP8L", b"VP8X"}


def test_animations_have_the_size_of_their_canvas() -> None:
    """An animated GIF's logical screen and an animated WebP's canvas are their size."""
    frames = [Image.new("RGB", (30, 20), color) for color in ("red", "blue")]
    for fmt in ("GIF", "WEBP"):
        out = io.BytesIO()
        frames[0].save(out, fmt, save_all=True, append_images=frames[1:], duration=100)
        assert image_size(out.getvalue()) == (30, 20)


def test_exif_orientation_is_not_applied_and_changes_no_price() -> None:
    """A JPEG stored 30x20 with orientation 6 (shown rotated, 20x30) reads as 30x20; the
    prices of 30x20 and 20x30 are the same, so the choice changes no price."""
    data = encoded((30, 20), "JPEG", exif=orientation(6))
    assert image_size(data) == (30, 20)
    assert openai_image_tokens(3000, 2000, "high") == openai_image_tokens(2000, 3000, "high")
    assert anthropic_image_tokens(3000, 2000) == anthropic_image_tokens(2000, 3000)


SMALL = [(v, size) for v in VARIANTS for size in [(1, 1), (17, 9)]]


@pytest.mark.parametrize(("variant", "size"), SMALL, ids=str)
def test_a_prefix_gives_the_size_once_it_holds_the_header_and_the_typed_error_before(
    variant: str, size: tuple[int, int]
) -> None:
    """Cut at every length, a file raises InvalidMediaError until its header is whole and
    gives the full size from then on; never an IndexError."""
    fmt, mode, options = VARIANTS[variant]
    data = encoded(size, fmt, mode, **options)
    answers: list[tuple[int, int] | None] = []
    view = memoryview(data)  # prefixes without copies
    for end in range(len(data) + 1):
        try:
            answers.append(image_size(view[:end]))
        except InvalidMediaError:
            answers.append(None)
    first = answers.index(size)
    assert answers[:first] == [None] * first
    assert answers[first:] == [size] * (len(data) + 1 - first)
    assert first <= 30 or fmt == "JPEG"


def jpeg_with(segments: bytes, data: bytes | None = None) -> bytes:
    """A real 33x21 JPEG with ``segments`` put between its SOI and its first marker."""
    data = data or encoded((33, 21), "JPEG")
    return data[:2] + segments + data[2:]


def app_segment(payload: bytes, marker: int = 0xE1) -> bytes:
    """An APPn segment holding ``payload``."""
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def test_a_20_mb_jpeg_of_app_segments_is_walked_by_their_lengths() -> None:
    """320 APP segments of 64 KB, each full of bytes that read as end-of-image markers, lie
    before the frame header: the walk jumps over them (a byte scan would stop at the first
    fake marker and fail)."""
    fake_markers = b"\xff\xd9" * (65_533 // 2) + b"\xff"
    data = jpeg_with(app_segment(fake_markers) * 320)
    assert len(data) > 20_000_000
    assert image_size(data) == (33, 21)


def test_fill_bytes_and_stray_bytes_before_a_marker_are_skipped() -> None:
    """0xFF fill bytes before a marker and stray bytes between segments, as decoders allow."""
    plain = encoded((33, 21), "JPEG")
    first = 4 + int.from_bytes(plain[4:6], "big")  # the end of the APP0 segment
    assert image_size(jpeg_with(b"\xff" * 9)) == (33, 21)
    assert image_size(plain[:first] + b"\x00stray\x12" + plain[first:]) == (33, 21)
    assert image_size(plain[:first] + b"\xff\xff\xff" + plain[first:]) == (33, 21)
    assert image_size(jpeg_with(b"\xff\xd0\xff\xd7\xff\x01")) == (33, 21)  # RST0, RST7, TEM


def test_the_walk_gives_up_after_its_marker_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of nothing but two-byte markers is refused after MAX_JPEG_MARKERS of them; one
    marker fewer before the frame header is read."""
    monkeypatch.setattr(media, "MAX_JPEG_MARKERS", 10)
    assert image_size(SOI + b"\xff\xd0" * 9 + sof(33, 21)) == (33, 21)
    with pytest.raises(InvalidMediaError, match="over 10 markers"):
        image_size(SOI + b"\xff\xd0" * 10 + sof(33, 21))


def test_the_real_marker_cap_is_reached() -> None:
    """At the real cap too, a flood of restart markers is refused, not walked to its end."""
    with pytest.raises(InvalidMediaError, match="markers before its frame header"):
        image_size(jpeg_with(b"\xff\xd0" * (media.MAX_JPEG_MARKERS + 1)))


def sof(width: int, height: int, length: int = 11, marker: int = 0xC0) -> bytes:
    """A frame header for one component."""
    return (
        bytes([0xFF, marker])
        + length.to_bytes(2, "big")
        + b"\x08"
        + height.to_bytes(2, "big")
        + width.to_bytes(2, "big")
        + b"\x01\x01\x11\x00"
    )


SOI = b"\xff\xd8"
PNG = b"\x89PNG\r\n\x1a\n"


def png(chunk: bytes, width: int, height: int) -> bytes:
    """A PNG signature and a first chunk of type ``chunk`` holding a size."""
    body = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    return PNG + (13).to_bytes(4, "big") + chunk + body + b"\x00" * 4


def webp(chunk: bytes, payload: bytes) -> bytes:
    """A RIFF WebP file whose first chunk is ``chunk`` with ``payload``."""
    body = b"WEBP" + chunk + len(payload).to_bytes(4, "little") + payload
    return b"RIFF" + len(body).to_bytes(4, "little") + body


MALFORMED = {
    "empty": (b"", "not a PNG, JPEG, GIF or WebP", None),
    "text": (b"hello, world", "not a PNG, JPEG, GIF or WebP", None),
    "pdf": (b"%PDF-1.7\n", "application/pdf data", "application/pdf"),
    "png-signature-only": (PNG, "truncated PNG", "image/png"),
    "png-first-chunk-not-ihdr": (png(b"IDAT", 4, 4), "not IHDR", "image/png"),
    "png-zero-width": (png(b"IHDR", 0, 4), "0x4 px", "image/png"),
    "png-width-over-2**31": (png(b"IHDR", 2**31, 4), "over 2**31 - 1", "image/png"),
    "gif-truncated": (b"GIF89a\x05\x00", "truncated GIF", "image/gif"),
    "gif-zero-height": (b"GIF89a\x05\x00\x00\x00\x00\x00\x00", "5x0 px", "image/gif"),
    "webp-unknown-chunk": (webp(b"VP8Z", bytes(20)), "not VP8, VP8L or VP8X", "image/webp"),
    "webp-truncated": (webp(b"VP8 ", b"")[:24], "truncated WebP", "image/webp"),
    "webp-vp8-not-key-frame": (
        webp(b"VP8 ", b"\x01\x00\x00\x9d\x01\x2a\x05\x00\x05\x00"),
        "key frame",
        "image/webp",
    ),
    "webp-vp8-bad-start-code": (
        webp(b"VP8 ", b"\x00\x00\x00\x9d\x01\x2b\x05\x00\x05\x00"),
        "key frame",
        "image/webp",
    ),
    "webp-vp8-zero-width": (
        webp(b"VP8 ", b"\x00\x00\x00\x9d\x01\x2a\x00\xc0\x05\x00"),
        "0x5 px",
        "image/webp",
    ),
    "webp-vp8l-bad-signature": (webp(b"VP8L", b"\x2e" + bytes(8)), "signature", "image/webp"),
    "webp-vp8l-version": (webp(b"VP8L", b"\x2f\x00\x00\x00\x20"), "signature", "image/webp"),
    "jpeg-soi-only": (b"\xff\xd8\xff", "truncated JPEG", "image/jpeg"),
    "jpeg-eoi-first": (SOI + b"\xff\xd9", "EOI at offset 2", "image/jpeg"),
    "jpeg-scan-first": (SOI + b"\xff\xda\x00\x08" + bytes(6), "a scan (SOS)", "image/jpeg"),
    "jpeg-second-soi": (SOI + b"\xff\xd8", "a second SOI", "image/jpeg"),
    "jpeg-stuffed-zero": (SOI + b"\xff\x00", "0xFF00", "image/jpeg"),
    "jpeg-length-0": (SOI + b"\xff\xe0\x00\x00", "length of 0", "image/jpeg"),
    "jpeg-length-1": (SOI + b"\xff\xe0\x00\x01", "length of 1", "image/jpeg"),
    "jpeg-length-cut": (SOI + b"\xff\xe0\x00", "truncated JPEG", "image/jpeg"),
    "jpeg-segment-past-end": (SOI + app_segment(bytes(100))[:50], "truncated", "image/jpeg"),
    "jpeg-short-frame-header": (SOI + sof(8, 8, length=7), "is 7 bytes", "image/jpeg"),
    "jpeg-frame-header-cut": (SOI + sof(8, 8)[:8], "truncated JPEG", "image/jpeg"),
    "jpeg-height-by-dnl": (SOI + sof(8, 0), "DNL", "image/jpeg"),
    "jpeg-zero-width": (SOI + sof(0, 8), "0x8 px", "image/jpeg"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_or_truncated_media_raise_the_typed_error(case: str) -> None:
    """Each defect raises InvalidMediaError (an InvalidMessageError, a ValueError) saying
    what is wrong, with the type the bytes were taken for."""
    data, message, kind = MALFORMED[case]
    with pytest.raises(InvalidMediaError, match=re.escape(message)) as raised:
        image_size(data)
    assert isinstance(raised.value, InvalidMessageError)
    assert isinstance(raised.value, HistoryError)
    assert isinstance(raised.value, ValueError)
    assert raised.value.media_type == kind


@pytest.mark.parametrize("marker", [0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA, 0xCB, 0xCF, 0xDE])
def test_every_kind_of_frame_header_gives_the_size(marker: int) -> None:
    """Baseline, extended, progressive, lossless and arithmetic frame headers, and a
    hierarchical JPEG's DHP, give the size; DHT (0xC4) before them is skipped."""
    dht = bytes([0xFF, 0xC4, 0x00, 0x04, 0x00, 0x00])
    assert image_size(SOI + dht + sof(300, 200, marker=marker)) == (300, 200)


def assert_size_or_typed_error(data: bytes) -> None:
    """``image_size(data)`` is a pair of positive ints or InvalidMediaError, nothing else."""
    try:
        width, height = image_size(data)
    except InvalidMediaError:
        return
    assert type(width) is int
    assert type(height) is int
    assert width >= 1
    assert height >= 1


@given(st.binary(max_size=200))
@example(b"\xff\xd8\xff")
@example(b"RIFF\x00\x00\x00\x00WEBP")
def test_any_bytes_give_a_size_or_the_typed_error(data: bytes) -> None:
    """Arbitrary bytes never raise an IndexError, a struct error or anything untyped."""
    assert_size_or_typed_error(data)


MAGIC = [PNG, PNG + b"\x00\x00\x00\x0dIHDR", SOI + b"\xff", b"GIF87a", b"GIF89a"]
MAGIC += [b"RIFF\x00\x00\x00\x00WEBP" + chunk for chunk in (b"VP8 ", b"VP8L", b"VP8X")]


@given(st.sampled_from(MAGIC), st.binary(max_size=120))
def test_bytes_behind_a_real_signature_give_a_size_or_the_typed_error(
    magic: bytes, rest: bytes
) -> None:
    """Past each format's signature, arbitrary bytes reach the parsers' deeper checks and
    still give a size or InvalidMediaError."""
    assert_size_or_typed_error(magic + rest)


REAL = {
    v: encoded((17, 9), *VARIANTS[v][:2], **VARIANTS[v][2])
    for v in ("jpeg-baseline", "jpeg-progressive", "png-rgb", "gif-rgb", "webp-lossy")
}


@given(st.sampled_from(sorted(REAL)), st.data())
def test_a_damaged_real_file_gives_a_size_or_the_typed_error(variant: str, data: Any) -> None:
    """Bytes of a real file overwritten at random places, and the file cut anywhere."""
    original = bytearray(REAL[variant])
    limit = min(len(original), 400)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, limit - 1))
        original[at] = data.draw(st.integers(0, 255))
    end = data.draw(st.integers(0, len(original)))
    assert_size_or_typed_error(bytes(original[:end]))


def wav_file() -> bytes:
    """A real WAV file, as the standard library writes it."""
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(8000)
        sound.writeframes(bytes(800))
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (wav_file(), "audio/wav"),
        (b"ID3\x04\x00\x00\x00\x00\x00\x00", "audio/mpeg"),
        (b"\xff\xfb\x90\x64" + bytes(20), "audio/mpeg"),  # MPEG-1 layer III, 128 kb/s
        (b"\xff\xf3\x48\xc4" + bytes(20), "audio/mpeg"),  # MPEG-2 layer III
        (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", "application/pdf"),
        (b"\xff\xf1\x50\x80" + bytes(20), None),  # AAC in ADTS: not layer III
        (b"\xff\xfb\xf0\x64", None),  # layer III with the forbidden bitrate index
        (b"\xff\xfb\x9c\x64", None),  # layer III with the reserved sample rate
        (b"RIFF\x00\x00\x00\x00AVI LIST", None),
        (b"%PDF", None),
        (b"", None),
    ],
)
def test_the_media_type_is_sniffed_from_magic_bytes(data: bytes, kind: str | None) -> None:
    """PDF, WAV and MP3 (an ID3 tag or a layer III frame) besides the images; other RIFF
    files, AAC and cut signatures are unknown."""
    assert media_type_of(data) == kind


def test_audio_and_documents_have_no_image_size() -> None:
    """A known type that is not an image is refused by image_size, naming the type."""
    with pytest.raises(InvalidMediaError, match="audio/wav data") as raised:
        image_size(wav_file())
    assert raised.value.media_type == "audio/wav"


# Prices: every number below is one the provider's page gives, with the page it is from.

OPENAI_EXAMPLES = [
    # OPENAI_GUIDE, "Cost calculation examples (for gpt-4o)".
    (1024, 1024, "high", 765),
    (2048, 4096, "high", 1105),
    (4096, 8192, "low", 85),
]


@pytest.mark.parametrize(("width", "height", "detail", "tokens"), OPENAI_EXAMPLES)
def test_openai_tile_prices_match_the_guide_s_examples(
    width: int, height: int, detail: media.Detail, tokens: int
) -> None:
    """GPT-4o's worked examples in OpenAI's vision guide, exactly."""
    assert openai_image_tokens(width, height, detail) == tokens
    assert openai_image_tokens(width, height, detail, model="gpt-4o-2024-08-06") == tokens


def test_openai_tile_tables_base_and_tile_prices_are_the_guide_s() -> None:
    """OPENAI_GUIDE's table, per model: base tokens (the low-detail price) and tile tokens,
    checked on a 1024x1024 image (four tiles)."""
    table = {
        "gpt-4o": (85, 170),
        "gpt-4.1": (85, 170),
        "gpt-4.5-preview": (85, 170),
        "gpt-4o-mini-2024-07-18": (2833, 5667),
        "o1": (75, 150),
        "o1-pro": (75, 150),
        "o3": (75, 150),
        "computer-use-preview": (65, 129),
    }
    for model, (base, tile) in table.items():
        assert openai_image_tokens(1024, 1024, "low", model=model) == base
        assert openai_image_tokens(1024, 1024, "high", model=model) == base + 4 * tile


@pytest.mark.parametrize(
    ("model", "multiplier"),
    [("gpt-4.1-mini", "1.62"), ("gpt-4.1-nano", "2.46"), ("o4-mini", "1.72")],
)
@pytest.mark.parametrize(
    ("width", "height", "patches"),
    # OPENAI_GUIDE, "GPT-4.1-mini, GPT-4.1-nano, o4-mini", cost calculation examples.
    [(1024, 1024, 1024), (1800, 2400, 1452), (2400, 1800, 1452)],
)
def test_openai_patch_prices_match_the_guide_s_examples(
    model: str, multiplier: str, width: int, height: int, patches: int
) -> None:
    """The guide's patch counts times the model's multiplier, rounded up; detail does not
    change them."""
    expected = math.ceil(patches * Fraction(multiplier))
    for detail in ("low", "high", "auto"):
        assert openai_image_tokens(width, height, detail, model=model) == expected


def test_openai_auto_is_charged_as_high_and_small_images_are_not_scaled_up() -> None:
    """``auto`` costs what ``high`` does (the model may choose it); a 512x512 image is one
    tile and a 513x512 one two, as no image is scaled up to a 768-px shortest side."""
    assert openai_image_tokens(300, 4000) == openai_image_tokens(300, 4000, "high")
    assert openai_image_tokens(512, 512, "high") == 85 + 170
    assert openai_image_tokens(513, 512, "high") == 85 + 2 * 170
    assert openai_image_tokens(1, 1, "high") == 85 + 170


ANTHROPIC_TABLE = [
    # CLAUDE_VISION, "Resolution and token cost": (size, standard tier, high-resolution tier).
    (200, 200, 64, 64),
    (1000, 1000, 1296, 1296),
    (1092, 1092, 1521, 1521),
    (1920, 1080, 1560, 2691),
    (2000, 1500, 1564, 3888),
    (3840, 2160, 1560, 4784),
]


@pytest.mark.parametrize(("width", "height", "standard", "high"), ANTHROPIC_TABLE)
def test_anthropic_prices_match_the_vision_page_s_table(
    width: int, height: int, standard: int, high: int
) -> None:
    """Every row of the table, on both tiers, exactly; and the same turned on its side."""
    assert anthropic_image_tokens(width, height) == standard
    assert anthropic_image_tokens(height, width) == standard
    assert anthropic_image_tokens(width, height, tier="high") == high


@pytest.mark.parametrize(
    ("size", "resized"),
    # CLAUDE_COORDINATES, "How Claude resizes and pads images": a 1920x1080 screenshot and
    # an A4 page scanned at 130 DPI, on the standard tier.
    [((1920, 1080), (1456, 819)), ((1075, 1520), (924, 1307))],
)
def test_anthropic_resizes_as_the_coordinates_page_s_examples(
    size: tuple[int, int], resized: tuple[int, int]
) -> None:
    """The size Claude scales an image to, then its price at that size."""
    assert media._anthropic_fit(*size, 1568, 1568) == resized
    assert anthropic_image_tokens(*size) == math.ceil(resized[0] / 28) * math.ceil(resized[1] / 28)
    assert anthropic_image_tokens(1075, 1520, tier="high") == 39 * 55  # within 4784: kept


dimension = st.integers(1, 20_000)


@given(dimension, dimension)
@example(2049, 513)
@example(1, 100_000)
@example(100_000, 1)
def test_prices_are_symmetric_and_within_each_formula_s_bounds(width: int, height: int) -> None:
    """Turning an image on its side changes no price; a tile price is at most 8 tiles (2 by
    4 after scaling), a patch price at most 1536 patches, a Claude price at most its tier's
    budget, and the scaled size Claude uses is within its limits and never larger."""
    for model in ("gpt-4o", "gpt-4.1-mini"):
        price = openai_image_tokens(width, height, "high", model=model)
        assert price == openai_image_tokens(height, width, "high", model=model)
    assert 85 + 170 <= openai_image_tokens(width, height) <= 85 + 8 * 170
    assert 2 <= openai_image_tokens(width, height, model="gpt-4.1-mini") <= 2489
    for tier, (edge, budget) in media.ANTHROPIC_TIERS.items():
        price = anthropic_image_tokens(width, height, tier=tier)  # type: ignore[arg-type]
        assert 1 <= price <= budget
        assert price == anthropic_image_tokens(height, width, tier=tier)  # type: ignore[arg-type]
        fitted = media._anthropic_fit(width, height, edge, budget)
        assert max(fitted) <= edge
        assert fitted[0] <= width
        assert fitted[1] <= height


@pytest.mark.parametrize("price", [openai_image_tokens, anthropic_image_tokens])
def test_prices_refuse_sizes_that_are_not_positive_integers(price: Any) -> None:
    """0 and negative sizes are a ValueError; floats, bools and strings a TypeError."""
    for width, height in [(0, 10), (10, 0), (-5, 10)]:
        with pytest.raises(ValueError, match="must be positive"):
            price(width, height)
    for bad in [10.0, True, "10"]:
        with pytest.raises(TypeError, match="width must be an integer"):
            price(bad, 10)


def test_unknown_details_tiers_and_models_are_refused() -> None:
    """A detail, a tier or a model the pages do not price is a ValueError naming it."""
    with pytest.raises(ValueError, match="'medium'"):
        openai_image_tokens(10, 10, "medium")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'ultra'"):
        anthropic_image_tokens(10, 10, tier="ultra")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no published image price for model 'gpt-9'"):
        openai_image_tokens(10, 10, model="gpt-9")
    # A longer name is not taken for a shorter one: the mini models have their own prices.
    assert openai_image_tokens(10, 10, "low", model="gpt-4.1-mini") == 2
    assert openai_image_tokens(10, 10, "low", model="gpt-4.1") == 85


# -- a media type its bytes contradict -----------------------------------------------------------


def signed() -> dict[str, bytes]:
    """Bytes of each type the signatures tell, as real writers make them."""
    images = {kind: encoded((4, 3), fmt) for fmt, kind in MEDIA_TYPES.items()}
    return {
        **images,
        "application/pdf": b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n",
        "audio/wav": wav_file(),
        "audio/mpeg": b"ID3\x04\x00\x00\x00\x00\x00\x00",
    }


@pytest.mark.parametrize("declared", media.SIGNED_TYPES)
@pytest.mark.parametrize("actual", media.SIGNED_TYPES)
def test_a_signed_type_contradicts_the_bytes_of_another(declared: str, actual: str) -> None:
    data = signed()[actual]
    assert media.contradicted(declared, data) == (None if declared == actual else actual)
    assert media.contradicted(declared.upper(), data) == (None if declared == actual else actual)


@pytest.mark.parametrize(
    ("declared", "data"),
    [
        ("image/jpg", encoded((2, 2), "JPEG")),  # names in use for the same type
        ("image/pjpeg", encoded((2, 2), "JPEG")),
        ("audio/mp3", b"ID3\x04\x00\x00\x00"),
        ("audio/x-wav", wav_file()),
        ("application/octet-stream", encoded((2, 2), "PNG")),  # types no signature tells
        ("image/apng", encoded((2, 2), "PNG")),
        ("text/plain", b"%PDF-1.4\n"),
        ("image/png", b"not an image at all"),  # no signature: nothing contradicts
        ("image/png", b""),
    ],
)
def test_what_contradicts_nothing(declared: str, data: bytes) -> None:
    assert media.contradicted(declared, data) is None


def test_png_bytes_given_as_jpeg_are_refused_when_the_part_is_built() -> None:
    """Refused whichever way the part is built (pydantic's ValidationError, a ValueError, whose
    error is the InvalidMediaError); a type the bytes announce, or none of the signed ones,
    is taken."""
    png, jpeg = encoded((4, 3), "PNG"), encoded((4, 3), "JPEG")
    builds: list[Callable[[], object]] = [
        lambda: ImagePart(data=png, media_type="image/jpeg"),
        lambda: ImagePart(url=data_url(png, "image/jpeg")),
        lambda: ImagePart.model_validate({"data": png, "media_type": "image/webp"}),
        lambda: ImagePart.model_validate_json(
            ImagePart(data=png, media_type="image/png").model_dump_json().replace("png", "gif")
        ),
        lambda: FilePart(data=png, media_type="application/pdf"),
        lambda: AudioPart(data=png, format="wav"),
        lambda: AudioPart(data=wav_file(), format="mp3"),
        lambda: Message.model_validate(
            {"role": "user", "parts": [{"type": "image", "data": jpeg, "media_type": "image/png"}]}
        ),
        lambda: from_openai_chat(
            {"type": "image_url", "image_url": {"url": data_url(png, "image/jpeg")}}
        ),
    ]
    for build in builds:
        with pytest.raises(ValidationError) as refused:
            build()
        error = refused.value.errors()[0]["ctx"]["error"]
        assert isinstance(error, InvalidMediaError)
        assert "but its data is" in str(error)
    assert ImagePart(data=png, media_type="image/png").media_type == "image/png"
    assert ImagePart(data=jpeg, media_type="image/jpg").media_type == "image/jpg"
    assert FilePart(data=png, media_type="application/octet-stream").data == png
    assert AudioPart(data=wav_file(), format="wav").format == "wav"


def test_a_part_built_without_validation_is_not_sent_as_what_it_is_not() -> None:
    """Every wire format sends the inline bytes through one function, which refuses a media
    type the bytes contradict (a part made with ``model_construct``)."""
    png = encoded((4, 3), "PNG")
    wrong = ImagePart.model_construct(data=png, media_type="image/jpeg")
    message = Message.user([ImagePart(data=png, media_type="image/png")])
    message.__dict__["parts"] = (wrong,)
    wire: tuple[formats.WireFormat, ...] = ("openai_chat", "openai_responses", "anthropic")
    for fmt in wire:
        with pytest.raises(InvalidMediaError, match="'image/jpeg', but its data is image/png"):
            formats.render([message], fmt)


def test_a_request_part_whose_bytes_contradict_its_type_is_the_typed_error() -> None:
    """Parsing a request (Anthropic's base64 source, a Responses file) with PNG bytes given as
    JPEG is an ``InvalidMediaError`` (an ``InvalidMessageError``), not a part."""
    png = base64.b64encode(encoded((4, 3), "PNG")).decode()
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": png}}
    with pytest.raises(InvalidMediaError, match="but its data is image/png") as refused:
        formats.from_anthropic_part(block)
    assert refused.value.media_type == "image/png"
