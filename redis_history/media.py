"""Media bytes: their type from magic bytes, an image's size from its header, its token price.

A message that carries an image costs the tokens the provider bills for it, and those depend
only on the image's width and height. :func:`image_size` reads them from the header (PNG,
JPEG, GIF, WebP) without decoding a pixel, and :func:`openai_image_tokens` and
:func:`anthropic_image_tokens` turn them into tokens with each provider's published formula.
Pure functions: no I/O, no Redis, no image library.

**Bounded work.** PNG, GIF and WebP sizes sit at fixed offsets in the first 30 bytes. A
JPEG's size is in its frame header (SOFn), after any number of segments (EXIF, ICC
profiles, thumbnails): the walk jumps over each segment by its length and skips fill and
stray bytes with a regular expression that never backtracks, so its cost grows with the
number of segments, not their bytes, and it gives up after :data:`MAX_JPEG_MARKERS` of
them. A 20 MB JPEG of 64 KB segments is read in under a millisecond; the slowest input
(the cap's worth of two-byte markers, or 20 MB of stray bytes) takes tens of milliseconds.
Anything cut short or malformed raises :class:`~redis_history.errors.InvalidMediaError`
naming what is wrong, never an ``IndexError``.

**EXIF orientation is ignored**: the size is the encoded frame's, as the header stores it. An
orientation tag only rotates by quarter turns or mirrors, which at most swaps width and
height, and every price below is the same for ``(w, h)`` and ``(h, w)``: no price depends
on it. Neither provider documents applying the tag; OpenAI's guide says its models do not
process an image's metadata. A caller that wants the displayed size swaps the two for
orientations 5 to 8.

**OpenAI** (https://platform.openai.com/docs/guides/images-vision#calculating-costs):

- GPT-4o, GPT-4.1, GPT-4.5, GPT-4o mini, o1, o1-pro, o3 and computer-use-preview bill
  *tiles*. ``detail="low"`` costs a fixed base (85 tokens on GPT-4o). ``"high"``: scale to
  fit in 2048x2048 keeping the aspect ratio, then so the shortest side is 768 px, count the
  512-px tiles that cover it, and charge ``base + tiles * per_tile`` (85 and 170 on GPT-4o;
  2833 and 5667 on GPT-4o mini; 75 and 150 on o1, o1-pro and o3; 65 and 129 on
  computer-use-preview). The guide's examples, for GPT-4o: 1024x1024 high is 765 tokens,
  2048x4096 high is 1105, 4096x8192 low is 85. The second step is read as a downscale only
  (a 512x512 image is one tile, not the four that scaling it up to 768 px would make): the
  guide's examples only scale down, and users' measurements on OpenAI's forum bill small
  images that way.
- GPT-4.1 mini, GPT-4.1 nano and o4-mini bill *patches*: the 32-px patches that cover the
  image, ``ceil(w/32) * ceil(h/32)``; over 1536, the image is scaled by
  ``r = sqrt(32**2 * 1536 / (w * h))`` and again so one side is a whole number of patches,
  and the count is capped at 1536; then multiplied by 1.62 (GPT-4.1 mini), 2.46 (GPT-4.1
  nano) or 1.72 (o4-mini). The guide's examples: 1024x1024 is 1024 patches, 1800x2400 is
  1452. The guide gives these models no low-detail price, so ``detail`` does not change it.

**Anthropic** (https://platform.claude.com/docs/en/build-with-claude/vision, and the exact
resize rule in https://platform.claude.com/docs/en/build-with-claude/vision-coordinates):
an image costs one token per 28x28-px patch, ``ceil(w/28) * ceil(h/28)``. An image over
the model's limits is first scaled to the largest size that keeps its aspect ratio (the
short side rounded half to even) within both: no side over the long-edge limit, and no more
patches than the visual-token limit. The standard tier's limits are 1568 px and 1568
tokens; the high-resolution tier's (Claude Opus 4.7 and later models the page lists) 2576 px
and 4784 tokens. The page's table: 200x200 is 64 tokens, 1000x1000 is 1296, 1092x1092 is
1521, 1920x1080 is 1560 (standard) or 2691 (high). This replaces the older published
approximation ``w * h / 750`` after scaling to at most 1568 px and about 1.15 megapixels,
which its table put at about 54, 1334 and 1590 for the first three.

Every count here is exact arithmetic (integers and fractions): a float's rounding never adds
a tile or a patch at a boundary.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Literal

from redis_history.errors import InvalidMediaError
from redis_history.limits import count

__all__ = [
    "ANTHROPIC_TIERS",
    "IMAGE_TYPES",
    "MAX_JPEG_MARKERS",
    "OPENAI_PATCH_MODELS",
    "OPENAI_TILE_MODELS",
    "SIGNED_TYPES",
    "anthropic_image_tokens",
    "contradicted",
    "image_size",
    "media_type_of",
    "openai_image_tokens",
]

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types :func:`image_size` reads: the ones both providers accept."""

SIGNED_TYPES = (*IMAGE_TYPES, "application/pdf", "audio/wav", "audio/mpeg")
"""The media types :func:`media_type_of` tells from a signature."""

_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "image/x-png": "image/png",
    "application/x-pdf": "application/pdf",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/mp3": "audio/mpeg",
    "audio/mpeg3": "audio/mpeg",
    "audio/x-mpeg-3": "audio/mpeg",
}
"""Names in use for the signed types, which name no other."""

MAX_JPEG_MARKERS = 65_536
"""The most markers a JPEG walk reads before its frame header. Real files have tens (a
16 MB ICC profile split into 64 KB segments is 256); the cap bounds the work of a file made
of nothing but two-byte markers."""

OPENAI_TILE_MODELS: dict[str, tuple[int, int]] = {
    "gpt-4o": (85, 170),
    "gpt-4.1": (85, 170),
    "gpt-4.5-preview": (85, 170),
    "gpt-4o-mini": (2833, 5667),
    "o1": (75, 150),
    "o1-pro": (75, 150),
    "o3": (75, 150),
    "computer-use-preview": (65, 129),
}
"""OpenAI models billed by 512-px tiles: ``(base tokens, tokens per tile)``, as the guide's
table gives them. The base alone is the ``detail="low"`` price."""

OPENAI_PATCH_MODELS: dict[str, Fraction] = {
    "gpt-4.1-mini": Fraction("1.62"),
    "gpt-4.1-nano": Fraction("2.46"),
    "o4-mini": Fraction("1.72"),
}
"""OpenAI models billed by 32-px patches, with the multiplier the guide gives for each."""

ANTHROPIC_TIERS: dict[str, tuple[int, int]] = {
    "standard": (1568, 1568),
    "high": (2576, 4784),
}
"""Claude's resolution tiers: ``(longest side in px, most visual tokens)``."""

Detail = Literal["low", "high", "auto"]
Tier = Literal["standard", "high"]

_PNG = b"\x89PNG\r\n\x1a\n"
_GIFS = (b"GIF87a", b"GIF89a")
_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_NEXT_MARKER = re.compile(rb"[^\xff]*+\xff+")
"""From a position: stray bytes, then the 0xFF and any fill bytes before a marker's code."""

_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
"""Start-of-frame markers, baseline and progressive, Huffman and arithmetic (not DHT 0xC4,
JPG 0xC8, DAC 0xCC)."""
_DHP = 0xDE
"""A hierarchical JPEG's whole-image size; laid out as a frame header."""
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
"""TEM and RST0-7: markers without a length."""
_SOI, _EOI, _SOS = 0xD8, 0xD9, 0xDA


def media_type_of(data: bytes | bytearray | memoryview) -> str | None:
    """The media type that ``data``'s first bytes announce, or ``None``.

    Images (``image/png``, ``image/jpeg``, ``image/gif``, ``image/webp``), PDF documents
    (``application/pdf``) and audio (``audio/wav``, ``audio/mpeg`` from an ID3 tag or an
    MPEG layer III frame header). Only the signature is checked: :func:`image_size` tells
    whether an image's header is whole.
    """
    head = bytes(memoryview(data)[:16])
    if head.startswith(_PNG):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(_GIFS):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith(b"ID3") or _mp3_frame(head):
        return "audio/mpeg"
    return None


def contradicted(media_type: str, data: bytes | bytearray | memoryview) -> str | None:
    """The type ``data``'s signature announces when it contradicts ``media_type``, else
    ``None``.

    ``media_type`` contradicts it when it names one of :data:`SIGNED_TYPES` (in any case,
    or by a name in use for one, such as ``image/jpg``) and the signature is another's: PNG
    bytes given as ``image/jpeg``, or as ``audio/wav``. A type the signatures do not tell
    (``application/octet-stream``, ``text/plain``, ``image/apng``), and data whose first
    bytes match no signature, contradict nothing. Reads 16 bytes.
    """
    declared = media_type.lower()
    declared = _ALIASES.get(declared, declared)
    if declared not in SIGNED_TYPES:
        return None
    actual = media_type_of(data)
    return actual if actual is not None and actual != declared else None


def _mp3_frame(head: bytes) -> bool:
    """Whether ``head`` opens with an MPEG audio layer III frame header."""
    if len(head) < 3 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return False
    version, layer = (head[1] >> 3) & 3, (head[1] >> 1) & 3
    bitrate, rate = head[2] >> 4, (head[2] >> 2) & 3
    return version != 1 and layer == 1 and bitrate != 15 and rate != 3


def image_size(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(width, height)`` in pixels, read from a PNG, JPEG, GIF or WebP header.

    Nothing is decoded and no more than the header is read (see the module docstring for
    JPEG's segment walk). The size is the encoded frame's: an EXIF orientation is not
    applied. A GIF's size is its logical screen's; a WebP's its canvas's.

    Args:
        data: the image file's bytes (a prefix that holds the header is enough).

    Returns:
        ``(width, height)``, both at least 1.

    Raises:
        InvalidMediaError: ``data`` is not one of the four formats, or its header is
            truncated or malformed; the message says which and where.
    """
    view = memoryview(data).cast("B")
    kind = media_type_of(view)
    if kind == "image/png":
        return _png_size(view)
    if kind == "image/jpeg":
        return _jpeg_size(view)
    if kind == "image/gif":
        return _gif_size(view)
    if kind == "image/webp":
        return _webp_size(view)
    what = f"{kind} data" if kind else f"bytes starting {bytes(view[:8])!r}"
    raise InvalidMediaError(f"not a PNG, JPEG, GIF or WebP image: {what}", media_type=kind)


def _need(view: memoryview, end: int, kind: str, what: str) -> None:
    """Raise unless ``view`` holds ``end`` bytes, the ones ``what`` needs."""
    if len(view) < end:
        raise InvalidMediaError(
            f"truncated {kind}: {what} needs {end} bytes, there are {len(view)}",
            media_type=f"image/{kind.lower()}",
        )


def _sized(width: int, height: int, kind: str) -> tuple[int, int]:
    """``(width, height)``, refused when either is 0."""
    if width < 1 or height < 1:
        raise InvalidMediaError(
            f"{kind} header gives a size of {width}x{height} px",
            media_type=f"image/{kind.lower()}",
        )
    return width, height


def _png_size(view: memoryview) -> tuple[int, int]:
    """The size in a PNG's IHDR chunk, which the format requires to come first."""
    _need(view, 24, "PNG", "the IHDR chunk")
    if bytes(view[12:16]) != b"IHDR":
        raise InvalidMediaError(
            f"PNG's first chunk is {bytes(view[12:16])!r}, not IHDR", media_type="image/png"
        )
    width = int.from_bytes(view[16:20], "big")
    height = int.from_bytes(view[20:24], "big")
    if width > 2**31 - 1 or height > 2**31 - 1:
        raise InvalidMediaError(
            f"PNG header gives a size of {width}x{height} px, over 2**31 - 1",
            media_type="image/png",
        )
    return _sized(width, height, "PNG")


def _gif_size(view: memoryview) -> tuple[int, int]:
    """The size of a GIF's logical screen, the canvas its frames are drawn on."""
    _need(view, 10, "GIF", "the logical screen descriptor")
    return _sized(int.from_bytes(view[6:8], "little"), int.from_bytes(view[8:10], "little"), "GIF")


def _webp_size(view: memoryview) -> tuple[int, int]:
    """The size in a WebP's first chunk: a lossy frame, a lossless one, or the extended
    format's canvas."""
    _need(view, 16, "WebP", "the first chunk's header")
    chunk = bytes(view[12:16])
    if chunk == b"VP8 ":
        _need(view, 30, "WebP", "a lossy frame header")
        if view[20] & 1 or bytes(view[23:26]) != b"\x9d\x01\x2a":
            raise InvalidMediaError(
                "WebP's VP8 chunk does not open with a key frame", media_type="image/webp"
            )
        width = int.from_bytes(view[26:28], "little") & 0x3FFF
        height = int.from_bytes(view[28:30], "little") & 0x3FFF
        return _sized(width, height, "WebP")
    if chunk == b"VP8L":
        _need(view, 25, "WebP", "a lossless header")
        bits = int.from_bytes(view[21:25], "little")
        if view[20] != 0x2F or bits >> 29:
            raise InvalidMediaError(
                "WebP's VP8L chunk has no lossless signature", media_type="image/webp"
            )
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        _need(view, 30, "WebP", "the extended header")
        width = int.from_bytes(view[24:27], "little") + 1
        height = int.from_bytes(view[27:30], "little") + 1
        return width, height
    raise InvalidMediaError(
        f"WebP's first chunk is {chunk!r}, not VP8, VP8L or VP8X", media_type="image/webp"
    )


def _jpeg_size(view: memoryview) -> tuple[int, int]:
    """The size in a JPEG's frame header, found by jumping from segment to segment."""
    size = len(view)
    at = 2  # after SOI
    for _ in range(MAX_JPEG_MARKERS):
        found = _NEXT_MARKER.match(view, at) if at < size else None
        if found is None or found.end() >= size:
            raise _jpeg_error(f"truncated JPEG: {size} bytes end before its frame header")
        at = found.end()  # the marker's code, after 0xFF and any fill bytes
        marker = view[at]
        if marker in _SOF or marker == _DHP:
            _need(view, at + 8, "JPEG", f"the frame header at offset {at - 1}")
            length = int.from_bytes(view[at + 1 : at + 3], "big")
            if length < 8:
                raise _jpeg_error(f"JPEG's frame header at offset {at - 1} is {length} bytes")
            height = int.from_bytes(view[at + 4 : at + 6], "big")
            width = int.from_bytes(view[at + 6 : at + 8], "big")
            if height == 0 and width:
                # Legal, but the height only comes after the first scan (a DNL marker).
                raise _jpeg_error("JPEG's frame header defers its height to a DNL marker")
            return _sized(width, height, "JPEG")
        if marker in _STANDALONE:
            at += 1
            continue
        if marker in (_SOI, _EOI, _SOS, 0x00):
            name = {_SOI: "a second SOI", _EOI: "EOI", _SOS: "a scan (SOS)"}.get(marker, "0xFF00")
            raise _jpeg_error(f"JPEG has {name} at offset {at - 1}, before its frame header")
        _need(view, at + 3, "JPEG", f"the segment length at offset {at - 1}")
        length = int.from_bytes(view[at + 1 : at + 3], "big")
        if length < 2:
            raise _jpeg_error(f"JPEG segment at offset {at - 1} has a length of {length}")
        at += 1 + length
    raise _jpeg_error(f"JPEG has over {MAX_JPEG_MARKERS:,} markers before its frame header")


def _jpeg_error(message: str) -> InvalidMediaError:
    """An ``InvalidMediaError`` about a JPEG."""
    return InvalidMediaError(message, media_type="image/jpeg")


def _dimensions(width: int, height: int) -> tuple[int, int]:
    """``width`` and ``height`` as positive ints: ``TypeError`` or ``ValueError`` otherwise."""
    return count(width, "width", low=1), count(height, "height", low=1)


def openai_image_tokens(
    width: int, height: int, detail: Detail = "auto", *, model: str = "gpt-4o"
) -> int:
    """The input tokens OpenAI bills for an image of ``width`` x ``height`` pixels.

    Tile models (:data:`OPENAI_TILE_MODELS`) charge their base for ``detail="low"`` and
    base plus 512-px tiles for ``"high"``; ``"auto"`` lets the model choose, and is charged
    as ``"high"``, the larger, so a budget is never short. Patch models
    (:data:`OPENAI_PATCH_MODELS`) charge the 32-px patches times the model's multiplier,
    rounded up, whatever the detail. The formulas and their source are in the module
    docstring.

    Args:
        width: the image's width in pixels, at least 1.
        height: its height in pixels, at least 1.
        detail: the ``detail`` of the image part: ``"low"``, ``"high"`` or ``"auto"``.
        model: an OpenAI model name, with or without a snapshot date
            (``"gpt-4o-2024-08-06"``).

    Returns:
        The image's tokens.

    Raises:
        TypeError: ``width`` or ``height`` is not an int.
        ValueError: a size under 1, an unknown ``detail``, or a model not in either table.
    """
    width, height = _dimensions(width, height)
    if detail not in ("low", "high", "auto"):
        raise ValueError(f"detail must be 'low', 'high' or 'auto', got {detail!r}")
    name = _SNAPSHOT.sub("", model)
    if name in OPENAI_PATCH_MODELS:
        return math.ceil(_openai_patches(width, height) * OPENAI_PATCH_MODELS[name])
    if name not in OPENAI_TILE_MODELS:
        known = ", ".join(sorted([*OPENAI_TILE_MODELS, *OPENAI_PATCH_MODELS]))
        raise ValueError(f"no published image price for model {model!r}; known: {known}")
    base, per_tile = OPENAI_TILE_MODELS[name]
    if detail == "low":
        return base
    return base + per_tile * _openai_tiles(width, height)


def _openai_tiles(width: int, height: int) -> int:
    """The 512-px tiles covering the image once fit in 2048x2048 and its shortest side is
    at most 768 px (never scaled up)."""
    scale = min(Fraction(1), Fraction(2048, max(width, height)))
    scale *= min(Fraction(1), Fraction(768) / (min(width, height) * scale))
    return math.ceil(width * scale / 512) * math.ceil(height * scale / 512)


def _openai_patches(width: int, height: int) -> int:
    """The 32-px patches the guide counts for an image: at most 1536.

    Past 1536, the guide scales by ``r = sqrt(1536 * 32**2 / (w * h))``, so that ``w * r``
    is ``sqrt(1536 * w / h)`` patches wide, then by the smaller of ``floor(x) / x`` for the
    two sides, which makes the binding side exactly ``floor(x)`` patches and the other
    ``floor(x)`` times the aspect ratio. ``floor(sqrt(p / q))`` is ``isqrt(p // q)``, so
    all of it is done in integers.
    """
    patches = -(-width // 32) * -(-height // 32)
    if patches <= 1536:
        return patches
    columns = math.isqrt(1536 * width // height)
    rows = math.isqrt(1536 * height // width)
    # The binding side is the one with the smaller floor(x) / x: columns / sqrt(1536 w / h)
    # against rows / sqrt(1536 h / w), that is columns * h against rows * w.
    if columns * height <= rows * width:
        columns = max(columns, 1)
        rows = -(-height * columns // width)
    else:
        rows = max(rows, 1)
        columns = -(-width * rows // height)
    return min(columns * rows, 1536)


def anthropic_image_tokens(width: int, height: int, *, tier: Tier = "standard") -> int:
    """The input tokens Anthropic bills for an image of ``width`` x ``height`` pixels.

    One token per 28-px patch, after scaling the image down to the tier's limits if it is
    over them (the rule and its source are in the module docstring). ``tier="high"`` is
    the high-resolution tier of Claude Opus 4.7 and later models the vision page lists;
    every other model is ``"standard"``.

    Args:
        width: the image's width in pixels, at least 1.
        height: its height in pixels, at least 1.
        tier: ``"standard"`` (1568 px, 1568 tokens) or ``"high"`` (2576 px, 4784 tokens).

    Returns:
        The image's tokens.

    Raises:
        TypeError: ``width`` or ``height`` is not an int.
        ValueError: a size under 1, or an unknown tier.
    """
    width, height = _dimensions(width, height)
    if tier not in ANTHROPIC_TIERS:
        raise ValueError(f"tier must be 'standard' or 'high', got {tier!r}")
    edge, budget = ANTHROPIC_TIERS[tier]
    width, height = _anthropic_fit(width, height, edge, budget)
    return _claude_patches(width, height)


def _claude_patches(width: int, height: int) -> int:
    """The 28-px patches covering ``width`` x ``height``."""
    return -(-width // 28) * -(-height // 28)


def _anthropic_fit(width: int, height: int, edge: int, budget: int) -> tuple[int, int]:
    """The size Claude scales an image to: unchanged if it is within both limits, else the
    longest side that keeps the aspect ratio (short side rounded half to even) within both.
    """

    def fits(w: int, h: int) -> bool:
        # The page pads each side up to a multiple of 28 before this check; both tiers'
        # edges are multiples of 28, so the padded side fits exactly when the side does.
        return max(w, h) <= edge and _claude_patches(w, h) <= budget

    if fits(width, height):
        return width, height
    long, short = max(width, height), min(width, height)

    def shorter(side: int) -> int:
        # round() of a Fraction rounds exact halves to even, as the page says the API does.
        return max(round(Fraction(side * short, long)), 1)

    # Whether a long side fits only grows as it shrinks; 1 px always fits, ``long`` does not.
    low, high = 1, long
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle, shorter(middle)):
            low = middle
        else:
            high = middle
    return (low, shorter(low)) if width >= height else (shorter(low), low)
