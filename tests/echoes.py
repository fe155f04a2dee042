"""How a server may echo a secret back: the forms the redaction must catch, by name."""

from __future__ import annotations

import json
import urllib.parse


def _utf16(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def escaped_forms(secret: str) -> dict[str, str]:
    """``secret`` as given, JSON-escaped (ASCII or not, every character as ``\\u``, inside
    JSON again), backslash-escaped, Python-escaped and URL-encoded (three ways), by name."""
    return {
        "plain": secret,
        "json": json.dumps(secret)[1:-1],
        "json-utf8": json.dumps(secret, ensure_ascii=False)[1:-1],
        "json-every-char": "".join(f"\\u{unit:04x}" for unit in _utf16(secret)),
        "json-in-json": json.dumps(json.dumps(secret))[1:-1],
        "backslash": "".join(c if c.isalnum() else f"\\{c}" for c in secret),
        "python-escape": secret.encode("unicode_escape").decode(),
        "quote": urllib.parse.quote(secret),
        "quote-safe-nothing": urllib.parse.quote(secret, safe=""),
        "quote-plus": urllib.parse.quote_plus(secret),
    }
