"""Secrets kept out of what the library shows: exception messages, log lines, reprs, job errors.

:func:`redact_url` masks the password a URL carries; :class:`Redactor` masks
given secrets (passwords, API keys) wherever they occur in a text, also as an
echo escaped for JSON (``\\u0073``, ``\\/``), escaped with backslashes or
URL-encoded (``%73``, ``+`` for a space), in any mix, and every URL's password;
it also masks Redis's echo of ``AUTH``/``HELLO`` arguments (``unknown command
'HELLO', with args beginning with: '3' 'AUTH' 'default' '<password>'``), which a
server that does not know the command sends back. :meth:`Redactor.exception`
does the same to an exception and to every one chained to it, in place, so a
traceback (a log line, the error RQ stores for a failed job) shows none.

Masking is textual: a secret is masked wherever its text occurs, so a very short
one also masks unrelated text that happens to spell it.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["MASK", "NOTHING", "Redactor", "client_secrets", "redact_url", "url_secrets"]

MASK = "***"
"""What stands in for a secret."""

_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{0,30}://)(?P<userinfo>[^\s/?#]*)@")
"""A URL's user-info: the part of its authority before the last ``@``."""
_SECRET_PARAMS = r"password|passwd|pass|pwd|secret|token|access_token|api_key|apikey|key|auth"
_SECRET_PARAM = re.compile(rf"(?i)(?P<head>[?&;](?:{_SECRET_PARAMS})=)(?P<value>[^&#\s'\"]*)")
"""A query parameter that carries a secret (``unix://...?password=``)."""
_AUTH_ECHO = re.compile(
    r"(?i)(?P<head>command [`'\"]?(?:auth|hello)[`'\"]?,? with args beginning with:)[^\n]*"
)
"""Redis's echo of the arguments of an ``AUTH`` or ``HELLO`` it does not know."""
_SHORT_ESCAPES = {"\n": "n", "\r": "r", "\t": "t", "\b": "b", "\f": "f"}


def _userinfo(match: re.Match[str]) -> str:
    user, colon, _password = match["userinfo"].partition(":")
    return f"{match['head']}{user}:{MASK}@" if colon else f"{match['head']}{MASK}@"


def redact_url(url: str) -> str:
    """``url`` with the password in its user-info (or the whole user-info when it has no
    ``:``, a bare token) and any ``password=``-like query parameter masked."""
    return _SECRET_PARAM.sub(rf"\g<head>{MASK}", _USERINFO.sub(_userinfo, url))


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The secrets ``url`` carries (its password, a bare user-info token, the values of
    ``password=``-like query parameters), as given and decoded; empty for ``None``."""
    if not url:
        return ()
    found: list[str] = []
    for match in _USERINFO.finditer(url):
        user, colon, password = match["userinfo"].partition(":")
        found.append(password if colon else user)
    found += [match["value"] for match in _SECRET_PARAM.finditer(url)]
    found += [urllib.parse.unquote(s) for s in found]
    return tuple(dict.fromkeys(s for s in found if s))


def client_secrets(client: Any) -> tuple[str, ...]:
    """The password a redis-py client (sync or asyncio, standalone or cluster) connects with,
    as far as its connection options (``get_connection_kwargs()``, which all four client
    classes have) tell without asking a credential provider; none for another object."""
    get = getattr(client, "get_connection_kwargs", None)
    options = get() if callable(get) else None
    if not isinstance(options, dict):
        return ()
    provider = options.get("credential_provider")
    found = (options.get("password"), getattr(provider, "password", None))
    return tuple(s for s in found if isinstance(s, str) and s)


def _hex(number: int, width: int) -> str:
    """A pattern of ``number`` in ``width`` hex digits, either case."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{number:0{width}x}")


def _char(char: str) -> str:
    """A pattern of ``char`` as itself or escaped (JSON, Python, URL): ``\\u0073``, ``\\s``,
    ``\\x73``, ``\\U0001f600``, ``%73``, ``+`` for a space."""
    code = ord(char)
    utf16 = char.encode("utf-16-be", "surrogatepass")  # JSON spells astral characters as pairs
    units = [int.from_bytes(utf16[i : i + 2], "big") for i in range(0, len(utf16), 2)]
    forms = [
        re.escape(char),
        "".join(rf"\\+u{_hex(unit, 4)}" for unit in units),
        rf"\\+{re.escape(char)}",
        "".join(f"%{_hex(byte, 2)}" for byte in char.encode("utf-8", "surrogatepass")),
    ]
    if char in _SHORT_ESCAPES:
        forms.append(rf"\\+{_SHORT_ESCAPES[char]}")
    if code < 0x100:
        forms.append(rf"\\+x{_hex(code, 2)}")
    elif code >= 0x10000:
        forms.append(rf"\\+U{_hex(code, 8)}")
    if char == " ":
        forms.append(r"\+")
    return f"(?:{'|'.join(forms)})"


@lru_cache(maxsize=64)
def _pattern(secret: str) -> re.Pattern[str]:
    return re.compile("".join(map(_char, secret)))


@dataclass(frozen=True, slots=True)
class Redactor:
    """Masks :attr:`secrets` in texts and exceptions, with every URL's password."""

    secrets: tuple[str, ...] = ()
    """The strings to mask, longest first (so a secret holding another is masked whole)."""

    @classmethod
    def of(cls, *secrets: str | None) -> Redactor:
        """A redactor of the non-empty ``secrets``."""
        kept = dict.fromkeys(s for s in secrets if isinstance(s, str) and s)
        return cls(tuple(sorted(kept, key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        """``text`` with each secret, in any of its escaped forms, and every URL's password
        and ``AUTH``/``HELLO`` echo masked."""
        for secret in self.secrets:
            if secret == MASK:
                continue
            text = _pattern(secret).sub(MASK, text)
        text = _AUTH_ECHO.sub(rf"\g<head> {MASK}", text)
        return redact_url(text)

    def exception(self, exc: BaseException) -> str:
        """Redact ``exc`` and every exception chained to it (cause, context), in place: their
        arguments and text attributes. Returns ``str(exc)`` afterwards."""
        seen: set[int] = set()
        pending: list[BaseException | None] = [exc]
        while pending:
            current = pending.pop()
            if current is None or id(current) in seen:
                continue
            seen.add(id(current))
            self._scrub(current)
            pending += [current.__cause__, current.__context__]
        return str(exc)

    def _scrub(self, exc: BaseException) -> None:
        exc.args = tuple(self(a) if isinstance(a, str) else a for a in exc.args)
        names = [name for name, value in vars(exc).items() if isinstance(value, str)]
        if isinstance(exc, OSError):
            names += ["strerror", "filename", "filename2"]
        for name in names:
            value = getattr(exc, name, None)
            if isinstance(value, str):
                with contextlib.suppress(AttributeError, TypeError):  # a read-only attribute
                    setattr(exc, name, self(value))


NOTHING = Redactor()
"""A redactor of no given secret: it masks URLs' passwords and ``AUTH`` echoes only."""
