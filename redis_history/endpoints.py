"""An OpenAI-compatible HTTP endpoint: one JSON ``POST`` with retries, and errors that never
show the API key. The summarizer (``/chat/completions``) and the embedder (``/embeddings``)
send through it.

HTTP goes through the standard library: the official ``openai`` SDK adds eight packages
(about 35 MB, 0.3 s to import) and would still need the backoff policy, the reply checks and
the key redaction written here, which the tests pin down (fixed delays capped by
``max_backoff``, no retry on 409, a key echoed by the server never shown). ``urllib.request``
and what it brings (``http.client``, ``ssl``, ``email``) is imported by the first request,
not with this module: a process that never sends one never loads it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, TypedDict

from redis_history.errors import EndpointError
from redis_history.models import parse_json
from redis_history.redact import Redactor, redact_url, url_secrets

__all__ = ["Endpoint", "EndpointClient", "HttpSettings", "clip", "one_line"]

_RETRY_STATUSES = frozenset({408, 429})
"""Besides 5xx: request timeout and rate limit are worth another try; other 4xx are not."""
_DETAIL_CHARS = 300
"""How much of an unexpected response body an error message quotes."""


_ELLIPSIS = "…"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, newlines included, as one space."""
    return " ".join(text.split())


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word if one is near, with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= len(_ELLIPSIS):
        return _ELLIPSIS[:limit]
    cut = text[: limit - len(_ELLIPSIS)]
    space = cut.rfind(" ")
    if space >= len(cut) * 2 // 3:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


class _Transient(Exception):
    """One failed attempt that is worth retrying; the loop turns the last into the error."""

    def __init__(
        self, reason: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(reason)
        self.reason, self.status, self.retry_after = reason, status, retry_after


class Endpoint:
    """``POST {base_url}{path}`` of a JSON body, the reply's JSON returned.

    Connection errors, timeouts, HTTP 408, 429 and 5xx are retried with exponential backoff
    (a numeric ``Retry-After`` is honoured, up to ``max_backoff``); other errors are not. A
    failure raises ``error`` (an :class:`~redis_history.errors.EndpointError`) saying what
    failed, by ``what`` (``summarizer``, ``embedder``), with the key masked.
    """

    def __init__(
        self,
        *,
        base_url: str,
        path: str,
        what: str,
        error: type[EndpointError],
        api_key: str | None,
        api_key_env: str,
        timeout: float,
        max_retries: int,
        backoff: float,
        max_backoff: float,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        """Configure the endpoint; nothing is sent yet.

        Raises:
            ValueError: a URL that is not http(s), a non-positive timeout or a negative
                retry setting.
        """
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {redact_url(base_url)!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        if max_retries < 0 or backoff < 0 or max_backoff < 0:
            raise ValueError("max_retries, backoff and max_backoff must not be negative")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}{path}"
        self.what = what
        self.error = error
        self.api_key_env = api_key_env
        self.api_key = os.environ.get(api_key_env, "") if api_key is None else api_key
        self.redact = Redactor.of(self.api_key, *url_secrets(base_url))
        """Masks the key (and the URL's password), also as a server may echo it: JSON- or
        URL-escaped."""
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep

    @property
    def where(self) -> str:
        """The URL, its password masked."""
        return redact_url(self.url)

    def post(self, body: Mapping[str, Any]) -> tuple[Any, bytes, int]:
        """Send ``body``, retrying as configured: the reply's JSON, its raw bytes, and how
        many attempts it took.

        Raises:
            EndpointError (``error``): an HTTP error or timeout that retries did not cure, a
                reply that is not JSON.
        """
        payload = json.dumps(body, ensure_ascii=False).encode()
        try:
            raw, attempts = self._send(payload)
            try:
                return parse_json(raw, "the reply"), raw, attempts
            except ValueError as exc:
                reason = str(exc).removeprefix("the reply ")
                raise self.malformed(reason, raw, attempts) from exc
        except EndpointError as exc:
            self.redact.exception(exc)  # and the HTTP error chained to it
            raise

    def malformed(self, what: str, raw: bytes, attempts: int) -> EndpointError:
        """The error for a reply that is not what was asked: ``what`` it is, and its start."""
        return self.error(
            f"the reply of {self.where} {what}: {self.detail(raw) or '(empty body)'}",
            endpoint=self.where,
            attempts=attempts,
        )

    def detail(self, raw: bytes) -> str:
        """The start of a response body, redacted before it is cut (no half key is left)."""
        text = one_line(raw.decode("utf-8", errors="replace"))[: _DETAIL_CHARS * 4]
        return clip(self.redact(text), _DETAIL_CHARS)

    def _send(self, payload: bytes) -> tuple[bytes, int]:
        """Send ``payload``, retrying as configured: the body and the attempts it took."""
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return self._post(payload), attempt
            except _Transient as exc:
                if attempt == attempts:
                    raise self.error(
                        f"{self.what} request to {self.where} failed after {attempt} "
                        f"attempt{'s' if attempt > 1 else ''}: {exc.reason}",
                        status=exc.status,
                        endpoint=self.where,
                        attempts=attempt,
                    ) from exc.__cause__
                self._sleep(self._delay(attempt, exc.retry_after))
            except EndpointError as exc:
                exc.attempts = attempt
                raise
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = self.backoff * 2 ** (attempt - 1) if retry_after is None else retry_after
        return min(delay, self.max_backoff)

    def _post(self, payload: bytes) -> bytes:
        """One attempt: the response body, or ``_Transient`` / the error."""
        import urllib.error  # noqa: PLC0415  (HTTP only once a request is sent)
        import urllib.request  # noqa: PLC0415
        from http.client import HTTPException  # noqa: PLC0415

        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=payload, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            with exc:  # the error holds the response open
                try:
                    detail = self.detail(exc.read())
                except (OSError, HTTPException):
                    detail = ""
                retry_after = _seconds(exc.headers.get("Retry-After") if exc.headers else None)
            reason = f"HTTP {exc.code} {self.redact(str(exc.reason))}"
            reason += f": {detail}" if detail else ""
            if exc.code in _RETRY_STATUSES or exc.code >= 500:
                raise _Transient(reason, exc.code, retry_after) from exc
            if exc.code in (401, 403) and not self.api_key:
                reason += f" (no API key was sent: set {self.api_key_env})"
            raise self.error(
                f"{self.what} request to {self.where} failed: {reason}",
                status=exc.code,
                endpoint=self.where,
            ) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise _Transient(f"timed out after {self.timeout:g} s") from exc
            raise _Transient(f"cannot connect: {self.redact(str(exc.reason))}") from exc
        except TimeoutError as exc:
            raise _Transient(f"timed out after {self.timeout:g} s") from exc
        except (OSError, HTTPException) as exc:
            raise _Transient(f"connection failed: {type(exc).__name__}") from exc

    def shown(self) -> str:
        """The endpoint's settings for a ``repr``: the URL masked, the key as ``***``."""
        key = "***" if self.api_key else None
        return (
            f"base_url={redact_url(self.base_url)!r}, api_key={key}, timeout={self.timeout!r}, "
            f"max_retries={self.max_retries!r}"
        )


class Setting(Protocol):
    """A variable of :mod:`redis_history.settings` holding text (its ``Variable``)."""

    @property
    def name(self) -> str:
        """``REDIS_HISTORY_...``."""
        ...

    @property
    def default(self) -> str:
        """Its value when unset."""
        ...

    def read(self, environ: Mapping[str, str] | None = None) -> str:
        """Its value in ``environ``, checked; the default when unset."""
        ...


class HttpSettings(TypedDict, total=False):
    """How a client reaches its endpoint: the keywords every :class:`EndpointClient` takes.

    ``base_url`` the API root (``http://localhost:8000/v1``); ``api_key`` the bearer token
    (``None`` reads the variable ``api_key_env``, ``""`` sends no ``Authorization`` header);
    ``timeout`` seconds to wait on connecting and on each read, per attempt; ``max_retries``
    retries after the first attempt; ``backoff`` the first retry's delay in seconds,
    doubling each retry, up to ``max_backoff``; ``sleep`` called with each delay (tests
    inject a recorder).
    """

    base_url: str
    api_key: str | None
    api_key_env: str
    timeout: float
    max_retries: int
    backoff: float
    max_backoff: float
    sleep: Callable[[float], object]


class EndpointClient:
    """A client of one OpenAI-compatible endpoint (a summarizer, an embedder): the HTTP
    settings it takes (:class:`HttpSettings`) and its :class:`Endpoint`."""

    PATH: ClassVar[str]
    """The endpoint's path below the API root (``/chat/completions``)."""
    WHAT: ClassVar[str]
    """What the client is called in error messages (``summarizer``)."""
    ERROR: ClassVar[type[EndpointError]]
    """The error a failure raises."""

    def __init_subclass__(cls, *, path: str, what: str, error: type[EndpointError]) -> None:
        """A kind of client, named in its class statement: the endpoint's ``path``, ``what``
        errors call the client, the ``error`` they raise."""
        super().__init_subclass__()
        cls.PATH, cls.WHAT, cls.ERROR = path, what, error

    def __init__(self, **http: Any) -> None:
        """Reach the endpoint as ``http`` says (:class:`HttpSettings`); by default the OpenAI
        API, the key in ``OPENAI_API_KEY``, 60 s per attempt, 2 retries from 0.5 s up to 8 s
        (the defaults of the summarizer's and the embedder's variables)."""
        given = http
        self._endpoint = Endpoint(
            base_url=given.get("base_url", "https://api.openai.com/v1"),
            path=self.PATH,
            what=self.WHAT,
            error=self.ERROR,
            api_key=given.get("api_key"),
            api_key_env=given.get("api_key_env", "OPENAI_API_KEY"),
            timeout=given.get("timeout", 60.0),
            max_retries=given.get("max_retries", 2),
            backoff=given.get("backoff", 0.5),
            max_backoff=given.get("max_backoff", 8.0),
            sleep=given.get("sleep", time.sleep),
        )
        self.base_url = self._endpoint.base_url
        self.api_key_env = self._endpoint.api_key_env
        self.timeout = self._endpoint.timeout
        self.max_retries = self._endpoint.max_retries

    @classmethod
    def reached(
        cls, env: Mapping[str, str], base_url: Setting, api_key_env: Setting
    ) -> HttpSettings:
        """The API root and key that the variables ``base_url`` and ``api_key_env`` (the
        name of the variable holding the key) of ``env`` give.

        Raises:
            ValueError: a bad setting; or neither an API key nor another API root than the
                default (OpenAI's), which would fail every request.
        """
        key_env = api_key_env.read(env)
        root = base_url.read(env)
        api_key = env.get(key_env, "")
        if not api_key and root == base_url.default:
            raise ValueError(
                f"the openai {cls.WHAT} has no API key for {root}: set {key_env}, or "
                f"{base_url.name} to a server that needs none"
            )
        return {"base_url": root, "api_key": api_key, "api_key_env": key_env}


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` given in seconds; ``None`` for an absent value or an HTTP date."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None
