"""The OpenAI-compatible embedder against a real HTTP server on loopback: the request it
sends, the vectors it reads, its retries, and errors that never show the key."""

from __future__ import annotations

from typing import Any

import pytest
from chat_server import ChatServer, Reply

from redis_history import EmbeddingError, EndpointError
from redis_history.memory.embedders import OpenAICompatibleEmbedder, resolve_embedder

KEY = "sk-secret-embedding-key"


def embeddings(*vectors: list[float], order: list[int] | None = None) -> dict[str, Any]:
    """An embeddings reply, its items in ``order`` (their ``index`` says where each goes)."""
    indexes = order or list(range(len(vectors)))
    return {
        "object": "list",
        "model": "m",
        "data": [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in indexes],
    }


def embedder(server: ChatServer, sleeps: list[float], **options: Any) -> OpenAICompatibleEmbedder:
    settings: dict[str, Any] = {
        "base_url": server.url,
        "model": "m",
        "dimensions": 2,
        "api_key": KEY,
        "sleep": sleeps.append,
        **options,
    }
    return OpenAICompatibleEmbedder(**settings)


def test_a_batch_is_one_request_and_the_vectors_come_back_in_order(
    chat_server: ChatServer,
) -> None:
    chat_server.default = Reply(body=embeddings([1.0, 0.0], [0.0, 1.0], order=[1, 0]))
    sleeps: list[float] = []
    vectors = embedder(chat_server, sleeps).embed(["a", "b"])
    assert vectors == [[1.0, 0.0], [0.0, 1.0]]
    (seen,) = chat_server.requests
    assert seen.path.endswith("/embeddings")
    assert seen.body == {"model": "m", "input": ["a", "b"], "dimensions": 2}
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert embedder(chat_server, sleeps, send_dimensions=False).embed([]) == []


def test_a_busy_server_is_retried_and_a_refusal_is_not(chat_server: ChatServer) -> None:
    chat_server.replies = [Reply(status=429), Reply(status=503)]
    chat_server.default = Reply(body=embeddings([3.0, 4.0]))
    sleeps: list[float] = []
    assert embedder(chat_server, sleeps).embed(["a"]) == [[3.0, 4.0]]
    assert sleeps == [0.5, 1.0]
    chat_server.replies = [Reply(status=400, body={"error": f"bad key {KEY}"})]
    with pytest.raises(EmbeddingError, match=r"embedder request to .* failed: HTTP 400") as info:
        embedder(chat_server, sleeps).embed(["a"])
    assert isinstance(info.value, EndpointError)
    assert info.value.status == 400
    assert KEY not in str(info.value)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"data": [{"index": 0}]}, r"has no data\[i\].embedding"),
        ({"nothing": 1}, r"has no data\[i\].embedding"),
        (embeddings([1.0, 0.0], [0.0, 1.0]), "has 2 embeddings for 1 texts"),
    ],
)
def test_a_reply_without_one_vector_per_text_is_refused(
    chat_server: ChatServer, body: Any, match: str
) -> None:
    chat_server.default = Reply(body=body)
    with pytest.raises(EmbeddingError, match=match):
        embedder(chat_server, []).embed(["a"])


def test_the_key_never_shows_and_the_environment_configures_it(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = repr(embedder(chat_server, []))
    assert KEY not in shown
    assert "api_key=***" in shown
    environ = {
        "REDIS_HISTORY_EMBEDDER_BASE_URL": chat_server.url,
        "REDIS_HISTORY_EMBEDDER_MODEL": "local-model",
        "REDIS_HISTORY_EMBEDDER_DIMENSIONS": "2",
        "REDIS_HISTORY_EMBEDDER_API_KEY_ENV": "MY_KEY",
        "MY_KEY": KEY,
    }
    configured = OpenAICompatibleEmbedder.from_env(environ)
    assert (configured.name, configured.dimensions) == ("openai:local-model", 2)
    with pytest.raises(ValueError, match=r"no API key for https://api\.openai\.com/v1: set OPENAI"):
        OpenAICompatibleEmbedder.from_env({})
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    resolved = resolve_embedder("openai")
    assert isinstance(resolved, OpenAICompatibleEmbedder)
    assert resolved.model == "local-model"
    with pytest.raises(ValueError, match="dimensions must be at least 1"):
        OpenAICompatibleEmbedder(dimensions=0, api_key="")
