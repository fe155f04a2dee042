"""Each part's text or bytes stored once: an adapter keeps a framework's data verbatim in a
message's ``metadata`` (so it reads back equal) and the same content as the message's
:mod:`parts <redis_history.parts>` (so every wire format renders it). The kept copy holds
``""`` where a part's text or bytes were, and a list of places says where, so that they are
put back when the message is read.

A place is ``{"at": [key or index, ...], "part": i, "as": how}``: the path in the kept data,
the index of the part in ``message.parts``, and how the data writes it: ``"text"`` (a text
part's text), ``"base64"``, ``"data_url"`` (``data:<type>;base64,...``) or ``"utf8"``
(bytes as text). A value is taken out only if the part gives it back exactly.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Sequence
from typing import Any

from redis_history.parts import ContentPart, TextPart, data_url

__all__ = ["place", "put_back", "take_out", "written"]


def place(at: Sequence[Any], part: int, how: str) -> dict[str, Any]:
    """The place of part ``part``'s text or bytes: at path ``at``, written ``how``."""
    return {"at": list(at), "part": part, "as": how}


def written(part: ContentPart, how: Any) -> str | None:
    """``part``'s text or bytes as the data writes them (``how``); ``None`` if it has none
    inline, or ``how`` is not one of the known ways."""
    if isinstance(part, TextPart):
        return part.text if how == "text" else None
    data = part.data
    if data is None:
        return None
    if how == "base64":
        return base64.b64encode(data).decode()
    if how == "data_url":
        return data_url(data, part.media_type or "")
    if how == "utf8":
        return data.decode("utf-8", "surrogatepass")
    return None


def take_out(
    data: list[Any], parts: Sequence[ContentPart], places: list[dict[str, Any]]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """A copy of ``data`` with ``""`` at each place whose part gives its value back exactly,
    and those places (the others keep their value)."""
    data = copy.deepcopy(data)
    emptied = []
    for spot in places:
        holder, step = _at(data, spot["at"])
        value = written(parts[spot["part"]], spot["as"])
        if value is not None and _get(holder, step) == value:
            holder[step] = ""
            emptied.append(spot)
    return data, emptied


def _get(holder: Any, step: Any) -> Any:
    """``holder[step]``, or ``None`` where there is no such key or index."""
    try:
        return holder[step]
    except (LookupError, TypeError):
        return None


def put_back(data: list[Any], parts: Sequence[ContentPart], places: Any) -> list[Any]:
    """A copy of the kept ``data`` with each part's text or bytes back in its place. Places
    that no longer fit (a message rewritten without its adapter) are left as they are."""
    data = copy.deepcopy(data)
    for spot in places if isinstance(places, list) else ():
        try:
            holder, step = _at(data, spot["at"])
            value = written(parts[spot["part"]], spot["as"])
            if value is not None and holder[step] == "":
                holder[step] = value
        except (LookupError, TypeError):
            continue
    return data


def _at(data: Any, path: list[Any]) -> tuple[Any, Any]:
    """The container holding ``path``'s last step, and that step."""
    for step in path[:-1]:
        data = data[step]
    return data, path[-1]
