"""Content parts: what a multimodal message holds besides text.

A :class:`~redis_history.models.Message` holds either plain text (``content``, as always) or
``parts``, in order: :class:`TextPart`, :class:`ImagePart` (a URL, inline bytes with a media
type, or a provider's file id, and an optional detail level), :class:`FilePart` (a document or
file: inline bytes, a URL or a provider's file id, with a media type and a file name) and
:class:`AudioPart` (inline audio). Every wire format of :mod:`redis_history.context.formats`
renders them in its own shape, or raises :class:`~redis_history.errors.UnsupportedPartError`
naming the part it cannot carry.

Inline bytes are ``bytes`` in Python and base64 in JSON. ``data:`` URLs are taken apart
into inline bytes and their media type when parsed, so an image sent inline prices and
stores the same however it came.

A media type its bytes' signature contradicts (PNG bytes given as ``image/jpeg``:
:func:`~redis_history.media.contradicted`) is refused when the part is built, with
pydantic's ``ValidationError`` (a ``ValueError``) whose error is an
:class:`~redis_history.errors.InvalidMediaError`, and by every write of the store, for a
part that skipped validation. Read back from the store (or an export), a part stored
before this check takes the type its bytes announce, so it reads, renders and is written
back as what it is.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from redis_history.errors import InvalidMediaError, InvalidMessageError, UnsupportedPartError
from redis_history.media import contradicted

__all__ = [
    "PART_TYPES",
    "AudioPart",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "TextPart",
    "blob_data",
    "blobs_at_hand",
    "data_url",
    "decode_base64",
    "from_data_url",
    "from_openai_chat",
    "inline",
    "mislabeled",
    "stand_in",
    "stored_data",
    "to_openai_chat",
]

_PART_CONFIG = ConfigDict(
    frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
)

MediaType = Annotated[str, Field(min_length=3, max_length=255, pattern=r"^[\w.+-]+/[\w.+-]+$")]
"""A media type such as ``image/png`` (no parameters)."""

Detail = Literal["auto", "low", "high"]
"""How closely a model looks at an image (OpenAI's ``detail``); it sets the image's price."""


class _Part(BaseModel):
    """What every part has: its ``type``, first, and always written (also where defaults
    are left out, as in the stored form), so a reader tells the parts apart."""

    model_config = _PART_CONFIG

    type: str

    @model_serializer(mode="wrap")
    def _typed(self, handler: SerializerFunctionWrapHandler) -> Any:
        written = handler(self)
        return {"type": self.type, **written} if isinstance(written, dict) else written


class TextPart(_Part):
    """Text, in order with the other parts."""

    type: Literal["text"] = "text"
    text: str = Field(strict=True)


def _bytes_only(value: Any, info: ValidationInfo) -> Any:
    """Inline data from Python is ``bytes`` (a ``str`` is refused, not encoded); from JSON
    it is base64 text."""
    if info.mode == "python" and not isinstance(value, bytes | None):
        raise ValueError(f"inline data must be bytes, got {type(value).__name__}")
    return value


class BlobsWanted(Exception):
    """Raised by a read that met parts whose data is kept outside the list: ``digests``
    are to be fetched, and the read run again inside :func:`blob_data`."""

    def __init__(self, digests: set[str]) -> None:
        super().__init__(f"{len(digests)} blobs to read")
        self.digests = digests


_BLOBS: ContextVar[Mapping[str, bytes] | None] = ContextVar("blobs", default=None)
_WANTED: ContextVar[set[str] | None] = ContextVar("wanted", default=None)
_STORED: ContextVar[bool] = ContextVar("stored", default=False)


@contextmanager
def stored_reads() -> Iterator[None]:
    """Within it, parts are read from what the store wrote (an envelope, an export's line):
    a media type its data's signature contradicts, stored before that was refused, is
    replaced by the one the data announces instead of refused."""
    token = _STORED.set(True)
    try:
        yield
    finally:
        _STORED.reset(token)


@contextmanager
def blob_data(blobs: Mapping[str, bytes] | None) -> Iterator[set[str]]:
    """Within it, parts read with a ``blob`` get their data from ``blobs``; with ``None``,
    their digests are collected into the set it yields (their data left unset). Parts are
    read as the store's (:func:`stored_reads`)."""
    token = _BLOBS.set(blobs)
    wanted: set[str] = set()
    collecting = _WANTED.set(wanted)
    stored = _STORED.set(True)
    try:
        yield wanted
    finally:
        _STORED.reset(stored)
        _WANTED.reset(collecting)
        _BLOBS.reset(token)


def mislabeled(part: Any) -> str | None:
    """What is wrong with ``part``'s media type, or ``None``: its inline data's signature
    announces another type (:func:`~redis_history.media.contradicted`)."""
    data = getattr(part, "data", None)
    media_type = getattr(part, "media_type", None)
    if not data or media_type is None or (actual := contradicted(media_type, data)) is None:
        return None
    return f"{type(part).__name__}'s media type is {media_type!r}, but its data is {actual}"


def _checked_type(part: Any) -> Any:
    """``part``, or a copy with the media type its data announces when read from the store;
    ``InvalidMediaError`` for a contradicted type otherwise."""
    if (wrong := mislabeled(part)) is None:
        return part
    actual = contradicted(part.media_type, part.data)
    if not _STORED.get():
        raise InvalidMediaError(wrong, media_type=actual)
    if isinstance(part, AudioPart):
        formats = {"audio/wav": "wav", "audio/mpeg": "mp3"}
        return part.model_copy(update={"format": formats[actual]}) if actual in formats else part
    return part.model_copy(update={"media_type": actual})


def blobs_at_hand() -> bool:
    """Whether a read runs inside :func:`blob_data` with the blobs' data."""
    return _BLOBS.get() is not None


def stored_data(part: Any) -> Any:
    """``part``, read with a ``blob``, with its data from the blobs of :func:`blob_data`.

    Raises:
        ValueError: outside a store's read (``blob`` is the store's), or a blob missing.
    """
    digest = part.blob
    assert digest is not None
    blobs = _BLOBS.get()
    if blobs is None:
        wanted = _WANTED.get()
        if wanted is None:
            raise ValueError("blob is set by the store's reads only")
        wanted.add(digest)
        return part
    data = blobs.get(digest)
    if data is None:
        raise ValueError(f"the data of blob {digest} is missing")
    return _checked_type(part.model_copy(update={"data": data, "blob": None}))


class _Source(_Part):
    """Inline bytes, a URL, or a provider's file id: exactly one of them."""

    data: bytes | None = None
    """The bytes, inline (base64 in JSON)."""
    url: str | None = Field(default=None, strict=True, min_length=1)
    """Where the model fetches it (``https://...``); ``data:`` URLs are made inline."""
    media_type: MediaType | None = None
    """``image/png``, ``application/pdf``...: required with inline bytes."""
    file_id: str | None = Field(default=None, strict=True, min_length=1)
    """A file uploaded to the provider (OpenAI's or Anthropic's Files API): only the provider
    that issued it knows it."""
    blob: str | None = Field(default=None, exclude=True, repr=False)
    """Set by the store only, while a part it reads waits for its data (kept outside the
    message list, :mod:`redis_history.store.blobs`); never on a part a read returns."""

    @model_validator(mode="before")
    @classmethod
    def _inline_data_url(cls, values: Any) -> Any:
        url = values.get("url") if isinstance(values, dict) else None
        if isinstance(url, str) and url[:5].lower() == "data:":
            data, media_type = from_data_url(url)
            media_type = values.get("media_type") or media_type
            values = {**values, "url": None, "data": data, "media_type": media_type}
        return values

    _data = field_validator("data", mode="before")(_bytes_only)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.blob is not None:
            return cast(Self, stored_data(self))
        if (self.data is not None) + (self.url is not None) + (self.file_id is not None) != 1:
            raise ValueError(f"{type(self).__name__} needs exactly one of {self._names()}")
        if self.data is not None and self.media_type is None:
            raise ValueError(f"{type(self).__name__} with inline data needs a media_type")
        return cast(Self, _checked_type(self))

    @classmethod
    def _names(cls) -> str:
        return "data, url or file_id"


class ImagePart(_Source):
    """An image: a URL, inline bytes with their media type, or a provider's file id."""

    type: Literal["image"] = "image"
    detail: Detail | None = None
    """How closely the model looks (OpenAI); ``None`` is the API's default (``auto``)."""

    @classmethod
    def _names(cls) -> str:
        return "data or url, or a file_id"


class FilePart(_Source):
    """A document or file (a PDF, a text file): inline bytes, a URL, or a provider's file id."""

    type: Literal["file"] = "file"
    filename: str | None = Field(default=None, strict=True)
    """The file's name, sent where the format has one."""


class AudioPart(_Part):
    """Inline audio (OpenAI's ``input_audio``): its bytes and their format."""

    type: Literal["audio"] = "audio"
    data: bytes = b""
    """The audio, inline (base64 in JSON)."""
    format: Literal["wav", "mp3"]
    """The encoding, as OpenAI names it."""
    blob: str | None = Field(default=None, exclude=True, repr=False)
    """As :attr:`ImagePart.blob`: the store's, while a read waits for the data."""

    _data = field_validator("data", mode="before")(_bytes_only)

    @model_validator(mode="after")
    def _stored(self) -> Self:
        if self.blob is not None:
            return cast(Self, stored_data(self))
        if not self.data:
            raise ValueError("AudioPart needs its data")
        return cast(Self, _checked_type(self))

    @property
    def media_type(self) -> str:
        """``audio/wav`` or ``audio/mpeg``."""
        return "audio/wav" if self.format == "wav" else "audio/mpeg"


ContentPart = Annotated[TextPart | ImagePart | FilePart | AudioPart, Field(discriminator="type")]
"""One part of a message's content, told apart by its ``type``."""
PART_TYPES = (TextPart, ImagePart, FilePart, AudioPart)
"""The part classes, for ``isinstance``."""

_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[^;,]*)*;base64,", re.I)


def from_data_url(url: str) -> tuple[bytes, str]:
    """The bytes and media type of a base64 ``data:`` URL.

    Raises:
        InvalidMessageError: not a base64 ``data:`` URL with a media type, or bad base64.
    """
    head = _DATA_URL.match(url)
    if head is None or head["type"] is None:
        raise InvalidMessageError(
            "a data: URL must be 'data:<media type>;base64,<data>' "
            f"(got {url[:40]!r}{'...' if len(url) > 40 else ''})"
        )
    try:
        data = base64.b64decode(url[head.end() :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidMessageError("a data: URL's data is not base64") from None
    return data, head["type"].lower()


def data_url(data: bytes, media_type: str) -> str:
    """``data:<media_type>;base64,<data>``: inline bytes as OpenAI's chat format takes them."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def stand_in(part: ContentPart) -> str:
    """A short text standing for ``part`` where only text goes (a summarizer's input, a
    transcript): the text itself, or ``[image: image/png, 182 KB]``-like."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, AudioPart):
        return f"[audio: {part.media_type}, {_size(part.data)}]"
    what = "image" if isinstance(part, ImagePart) else "file"
    details = [
        d
        for d in (
            getattr(part, "filename", None),
            part.media_type,
            _size(part.data) if part.data is not None else part.url or part.file_id,
        )
        if d
    ]
    return f"[{what}: {', '.join(details)}]"


def _size(data: bytes) -> str:
    n = len(data)
    return f"{n} B" if n < 1000 else f"{n / 1000:.0f} KB" if n < 1_000_000 else f"{n / 1e6:.1f} MB"


# -- OpenAI chat completions (what the store renders too: ``snapshot_openai``) ----------------


def to_openai_chat(part: ContentPart) -> dict[str, Any]:
    """``part`` as a chat-completions content part: ``text``, ``image_url`` (a URL, or a
    ``data:`` URL for inline bytes), ``file`` (inline bytes or a file id) or ``input_audio``.

    Raises:
        UnsupportedPartError: a file given by URL, or an image given by file id, which chat
            completions cannot carry.
    """
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        if part.file_id is not None:
            raise UnsupportedPartError(
                "an image part given by file_id cannot be sent in the openai_chat format "
                "(its image_url takes a URL or inline data)",
                part="image",
                format="openai_chat",
            )
        image: dict[str, Any] = {"url": part.url or _inline_url(part)}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, AudioPart):
        if (wrong := mislabeled(part)) is not None:
            raise InvalidMediaError(wrong, media_type=contradicted(part.media_type, part.data))
        audio = base64.b64encode(part.data).decode()
        return {"type": "input_audio", "input_audio": {"data": audio, "format": part.format}}
    file: dict[str, Any] = {}
    if part.file_id is not None:
        file["file_id"] = part.file_id
    elif part.data is not None or part.blob is not None:  # a blob: a read's first pass
        file["file_data"] = _inline_url(part)
    else:
        raise UnsupportedPartError(
            "a file part given by URL cannot be sent in the openai_chat format "
            "(it takes inline data or a file_id)",
            part="file",
            format="openai_chat",
        )
    if part.filename is not None:
        file["filename"] = part.filename
    return {"type": "file", "file": file}


def _inline_url(part: ImagePart | FilePart) -> str:
    if part.data is None:  # a read's first pass, which its blobs' data will replace
        return f"blob:{part.blob}"
    return data_url(*inline(part))


def inline(part: ImagePart | FilePart) -> tuple[bytes, str]:
    """The inline bytes of ``part`` and their media type (a part with ``data`` has both), as
    every wire format sends them.

    Raises:
        InvalidMediaError: the data's signature contradicts the media type (a part made
            without validation: ``model_construct``, ``model_copy(update=...)``).
    """
    assert part.data is not None
    assert part.media_type is not None
    if (wrong := mislabeled(part)) is not None:
        raise InvalidMediaError(wrong, media_type=contradicted(part.media_type, part.data))
    return part.data, part.media_type


def from_openai_chat(part: Mapping[str, Any]) -> ContentPart:
    """A chat-completions content part as a part (the reverse of :func:`to_openai_chat`).

    Raises:
        InvalidMessageError: a part type chat completions does not define, or one missing
            what it needs (pydantic's ``ValidationError``, a ``ValueError``, for bad values).
    """
    kind = part.get("type")
    if kind == "text":
        return TextPart(type="text", text=part.get("text", ""))
    if kind == "image_url":
        image = part.get("image_url") or {}
        if isinstance(image, str):
            image = {"url": image}
        return ImagePart(type="image", url=image.get("url"), detail=image.get("detail"))
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        data = decode_base64(audio.get("data"), "input_audio data")
        return AudioPart(type="audio", data=data, format=audio.get("format"))
    if kind == "file":
        file = part.get("file") or {}
        return FilePart(
            type="file",
            url=file.get("file_data"),  # a data: URL, made inline
            file_id=file.get("file_id"),
            filename=file.get("filename"),
        )
    raise InvalidMessageError(f"content part of type {kind!r} is not supported in openai_chat")


def decode_base64(text: Any, what: str) -> bytes:
    """The bytes of base64 ``text`` (strict: no other characters, padding required).

    Raises:
        InvalidMessageError: naming ``what``: not text, or not base64.
    """
    if not isinstance(text, str):
        raise InvalidMessageError(f"{what} must be base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidMessageError(f"{what} is not base64") from None
