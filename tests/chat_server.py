"""A real HTTP server on 127.0.0.1 speaking the chat-completions wire format, for tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def completion(content: Any) -> dict[str, Any]:
    """A chat-completions reply carrying ``content``."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


@dataclass
class Reply:
    """What the fake server answers to one request."""

    status: int = 200
    body: Any = field(default_factory=lambda: completion("- Alice flies AF123 to Paris."))
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    """The status line's reason phrase; the standard one for ``status`` when ``None``."""


@dataclass
class Seen:
    """One request the fake server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class ChatServer:
    """A real HTTP server on 127.0.0.1 speaking the chat-completions wire format."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.default = Reply()
        self.requests: list[Seen] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(seen)
            return self.replies.pop(0) if self.replies else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                reply = server._next(Seen("POST", self.path, dict(self.headers.items()), body))
                if reply.delay:
                    server.stopping.wait(reply.delay)
                payload = (
                    reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                )
                try:
                    self.send_response(reply.status, reply.reason)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def chat_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatServer]:
    """A chat-completions server for this test, reached directly (no proxy), shut down after."""
    for name in (
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    with ChatServer() as running:
        yield running
