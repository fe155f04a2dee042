"""An OpenAI Agents SDK ``Session`` kept in redis-history: ``Runner.run(..., session=...)``.

How SDK items are stored:

- **Verbatim.** Every item ``add_items`` receives is kept, as the SDK gave it, in the
  ``metadata[ITEMS]`` of the message that holds it, and ``get_items`` returns exactly
  those dicts: messages, function calls and their outputs, reasoning, hosted tool
  calls, any item type the SDK adds later.
- **As messages the store checks.** Consecutive items of one side form one message, the
  way :mod:`redis_history.context.formats` reads Responses items: a model's reply
  (``reasoning``, assistant ``message``, ``function_call`` and other output items) is
  one assistant message whose ``tool_calls`` are its calls (``function_call``,
  ``custom_tool_call``, ``computer_call``, ``shell_call``, ``apply_patch_call``,
  ``program``, by ``call_id``); each ``*_output`` answering one is a tool message; user
  input (``message`` items of role ``user``, ``system`` or ``developer``) is a user
  message, since the store allows a system message only first. Items of a type the
  store has no role for join the message before them in the same call (or start an
  assistant message). So role order and tool pairing are checked atomically by the
  append script: an output that answers no open call is refused
  (:class:`~redis_history.errors.ToolPairingError`) and nothing of that call is written.
- **Bridges.** The SDK's order is looser than the store's: a new user input may follow
  a user input whose run failed, or tool outputs; a model reply may follow another.
  When the store refuses a call's messages for their *order* only, the session reads
  the tail's state and writes, in the same atomic batch, empty messages marked
  ``metadata[BRIDGE]`` that make the order valid (an empty assistant between two user
  messages, an empty user message between two replies, an empty result for a call
  the SDK left unanswered before a new message). ``get_items`` skips them. The common
  case (the order already valid) is one round trip.
- **Each text once.** A message's ``content`` is its items' text (what the store prices);
  when that text is one string of one item, the kept copy of the item holds ``""`` in
  its place and ``metadata[TEXT]`` says where, so a large tool output is stored once.
- **Images, files and audio as parts.** A user input whose content holds ``input_image``,
  ``input_file`` or ``input_audio`` parts, or a tool output whose ``output`` list holds
  images or files, is stored as a message with :mod:`parts <redis_history.parts>` (its
  texts as text parts), which every wire format renders. The kept copy of the items holds
  ``""`` where each part's text or inline bytes were, and ``metadata[PARTS]`` says where,
  so they are stored once. Messages stored before parts existed (text content, the image
  in the items alone) read back as they did.
- **Messages written by others** (compaction summaries, a pod using the store directly)
  have no ``ITEMS`` and read as the ``openai_responses`` wire format renders them (audio in
  a user message as the SDK's ``input_audio`` part, which its chat-completions models send).

``pop_item`` is fenced: it removes the message holding the last item by id
(:meth:`~redis_history.AsyncRedisHistory.rollback`), with the bridges written just
before it, and is refused (then reads again) if that message is gone, so each item is
returned by one pop at most, however many race for it; it never removes an item it did
not return. When that message holds more items (a reply with reasoning, parallel calls),
the others stay, through a ``replace`` of the conversation fenced on the ids the session
read: atomic, but it rewrites the whole list (O(n)) and is refused by any write
meanwhile. Popping a tool output reopens its call, which the store allows.

``add_items`` or ``pop_item`` repeated after an unknown outcome (``StoreUnavailableError``,
a cancelled task: the write may have landed, its reply lost) is applied once: the session
object remembers that call until its next one, and a repeat of it re-sends the same
write (the same message ids, or the pop's ``op_id``), which the store recognises.

Limits: only the same session object recognises the repeat, and only as its next call,
within the store's window of remembered writes; the bridges show in ``snapshot()`` and
to compaction as empty messages.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import redis.asyncio
from pydantic_core import to_json

from redis_history.context.formats import (
    from_responses_part,
    render,
    sdk_data,
    to_responses_part,
)
from redis_history.errors import (
    InvalidMessageError,
    RoleOrderError,
    StaleSnapshotError,
    ToolPairingError,
)
from redis_history.integrations._inline import place, put_back, take_out
from redis_history.models import Message, Role, ToolCall, check_nesting, parse_json
from redis_history.parts import (
    AudioPart,
    ContentPart,
    TextPart,
    from_openai_chat,
    to_openai_chat,
)
from redis_history.roles import RoleState
from redis_history.store.history import AsyncRedisHistory

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
else:
    TResponseInputItem = Any
    SessionSettings = Any

__all__ = ["BRIDGE", "ITEMS", "PARTS", "TEXT", "RedisHistorySession", "to_items", "to_messages"]

ITEMS = "openai_agents_items"
"""The ``metadata`` key holding the SDK items a message stores, verbatim and in order."""
TEXT = "openai_agents_text"
"""The ``metadata`` key saying where in ``ITEMS`` the message's ``content`` was taken out."""
PARTS = "openai_agents_parts"
"""The ``metadata`` key saying where in ``ITEMS`` each of the message's parts was taken out
(:mod:`redis_history.integrations._inline`)."""
BRIDGE = "openai_agents_bridge"
"""The ``metadata`` key marking a message written only so that the SDK's order passes."""

CALLS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "computer_call",
        "shell_call",
        "apply_patch_call",
        "program",
    }
)
"""Item types that are tool calls answered, by ``call_id``, by an item of type ``<type>_output``."""
OUTPUTS = frozenset(f"{kind}_output" for kind in CALLS)
REPLY = frozenset(
    {
        "reasoning",
        "compaction",
        "mcp_list_tools",
        "mcp_approval_request",
        "local_shell_call",
        "tool_search_call",
    }
)
"""Model output types kept in the assistant message (also any other ``*_call``)."""

ATTEMPTS = 4
"""How often a write refused because another writer got in first is tried again."""


def _plain(item: Any, index: int) -> dict[str, Any]:
    """An item as a dict: SDK items are TypedDicts; a pydantic output item is dumped. Refused
    if it nests deeper than the message's ``metadata[ITEMS]`` can hold it."""
    item = sdk_data(item, exclude_unset=True)
    if not isinstance(item, Mapping):
        raise TypeError(f"an Agents SDK item is a dict, not {type(item).__name__}")
    check_nesting({ITEMS: [item]}, f"item {index} in metadata[{ITEMS!r}]")
    return dict(item)


def _kind(item: Mapping[str, Any]) -> str:
    return str(item.get("type", "message"))  # an easy input message may leave the type out


def _side(item: Mapping[str, Any]) -> Role | None:
    """The role of the message an item belongs to; ``None``: it joins the one before it."""
    kind = _kind(item)
    if kind == "message":
        return "assistant" if item.get("role") == "assistant" else "user"
    if kind in CALLS:
        return "assistant" if item.get("call_id") else None
    if kind in OUTPUTS:
        return "tool" if item.get("call_id") else None
    if kind in REPLY or kind.endswith("_call"):
        return "assistant"
    return None


def _text(content: Any) -> str:
    """The text of a content string or list of parts (other parts are kept in the item)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, Mapping)]
        return "".join(str(p.get("text", p.get("refusal", ""))) for p in parts)
    return json.dumps(content, ensure_ascii=False)


def _arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments; ``{}`` if they are not a JSON object (the item keeps the text)."""
    raw = item.get("arguments")
    if isinstance(raw, str):
        what = f"{_kind(item)} {item.get('call_id')!r} arguments"
        raw = parse_json(raw, what, lenient=True) if raw.strip() else {}
    return raw if isinstance(raw, dict) else {}


def _text_path(item: Mapping[str, Any], key: str) -> list[Any] | None:
    """Where ``item``'s text is, if it is one string: ``[key]`` or ``[key, part, "text"]``."""
    value = item.get(key)
    if isinstance(value, str):
        return [key]
    if isinstance(value, list):
        texts = [
            i
            for i, part in enumerate(value)
            if isinstance(part, Mapping) and ("text" in part or "refusal" in part)
        ]
        if len(texts) == 1 and isinstance(value[texts[0]].get("text"), str):
            return [key, texts[0], "text"]
    return None


def _at(item: Any, path: list[Any]) -> tuple[Any, Any]:
    """The container holding ``path``'s last step, and that step."""
    for step in path[:-1]:
        item = item[step]
    return item, path[-1]


def _message(role: Role, items: list[dict[str, Any]]) -> Message:
    """The message holding ``items`` (all of one side), priced by their text.

    When the text is one item's one string, the stored copy of that item holds ``""`` in
    its place (``metadata[TEXT]`` says where), so the text is stored once.
    """
    texts: list[str] = []
    sources: list[tuple[int, list[Any] | None]] = []
    holders: list[tuple[int, str]] = []
    calls: list[ToolCall] = []
    call_id: str | None = None
    for index, item in enumerate(items):
        kind = _kind(item)
        key = None
        if kind == "message":
            key = "content"
        elif kind in CALLS and item.get("call_id") and role == "assistant":
            name = item.get("name")
            calls.append(
                ToolCall(
                    id=str(item["call_id"]),
                    name=name if isinstance(name, str) and name else kind,
                    arguments=_arguments(item),
                )
            )
        elif kind in OUTPUTS and role == "tool" and call_id is None:
            call_id = str(item["call_id"])
            key = "output"
        if key is not None:
            holders.append((index, key))
            text = _text(item.get(key))
            texts.append(text)
            if text:
                sources.append((index, _text_path(item, key)))
    if role != "assistant" and (found := _parts(items, holders)):
        parts, places = found
        held, places = take_out(items, parts, places)
        kept: dict[str, Any] = {ITEMS: held, PARTS: places} if places else {ITEMS: held}
        return Message(role=role, parts=tuple(parts), tool_call_id=call_id, metadata=kept)
    metadata: dict[str, Any] = {ITEMS: items}
    if len(sources) == 1 and sources[0][1] is not None:
        index, path = sources[0][0], sources[0][1]
        stored = copy.deepcopy(items[index])
        holder, step = _at(stored, path)
        holder[step] = ""
        metadata = {ITEMS: [*items[:index], stored, *items[index + 1 :]], TEXT: [index, *path]}
    if role == "tool":
        assert call_id is not None
        return Message.tool("".join(texts), tool_call_id=call_id, metadata=metadata)
    return Message(role=role, content="".join(texts), tool_calls=tuple(calls), metadata=metadata)


def _parts(
    items: list[dict[str, Any]], holders: list[tuple[int, str]]
) -> tuple[list[ContentPart], list[dict[str, Any]]] | None:
    """The parts of the content (or output) of ``items`` at ``holders``, with the places of
    their texts and bytes; ``None`` when they hold text only (the message stays text)."""
    parts: list[ContentPart] = []
    places: list[dict[str, Any]] = []
    for index, key in holders:
        value = items[index].get(key)
        if not isinstance(value, list):
            if text := _text(value):
                if isinstance(value, str):
                    places.append(place([index, key], len(parts), "text"))
                parts.append(TextPart(text=text))
            continue
        for at, content in enumerate(value):
            found = _content_part(content) if isinstance(content, Mapping) else None
            if found is not None:
                part, path, how = found
                if path is not None:
                    places.append(place([index, key, at, *path], len(parts), how))
                parts.append(part)
    if all(isinstance(part, TextPart) for part in parts):
        return None
    return parts, places


def _content_part(
    content: Mapping[str, Any],
) -> tuple[ContentPart, list[str] | None, str] | None:
    """A content part of an item as a part, with where its text or bytes are in it and how
    they are written; ``None`` for a part without text or media (kept in the item only)."""
    kind = content.get("type")
    if kind == "input_image":
        return from_responses_part(content), ["image_url"], "data_url"
    if kind == "input_file":
        return from_responses_part(content), ["file_data"], "data_url"
    if kind == "input_audio":  # the SDK's own part, as chat completions has it
        return from_openai_chat(content), ["input_audio", "data"], "base64"
    key = "text" if "text" in content else "refusal" if "refusal" in content else None
    if key is None:
        return None
    text = content[key]
    return TextPart(text=str(text)), [key] if isinstance(text, str) else None, "text"


def to_messages(items: Sequence[Any]) -> list[Message]:
    """The messages that store ``items``: one per run of items of one side.

    Raises:
        TypeError: an item is not a dict (or an SDK model).
        InvalidMessageError: an item, or a call's ``arguments`` text, nests deeper than
            ``MAX_NESTING`` (with the two levels of ``metadata[ITEMS]`` for an item).
        ValueError: an item holds what a message cannot (not JSON data, a call id twice).
    """
    groups: list[tuple[Role, list[dict[str, Any]]]] = []
    for index, raw in enumerate(items):
        item = _plain(raw, index)
        side = _side(item)
        if side is None:
            if groups:
                groups[-1][1].append(item)
                continue
            side = "assistant"
        joins = groups and side != "tool" and groups[-1][0] == side
        if joins and not (_kind(item) in CALLS and _has_call(groups[-1][1], item.get("call_id"))):
            groups[-1][1].append(item)
            continue
        groups.append((side, [item]))
    return [_message(role, group) for role, group in groups]


def _has_call(items: list[dict[str, Any]], call_id: Any) -> bool:
    return any(_kind(i) in CALLS and i.get("call_id") == call_id for i in items)


def to_items(messages: Sequence[Message]) -> list[TResponseInputItem]:
    """The SDK items ``messages`` hold, in order; bridges hold none."""
    out: list[Any] = []
    for message in messages:
        out.extend(_items_of(message))
    return out


def _items_of(message: Message) -> list[Any]:
    if message.metadata.get(BRIDGE) is True:
        return []
    items = message.metadata.get(ITEMS)
    if isinstance(items, list) and message.parts:
        return put_back(items, message.parts, message.metadata.get(PARTS))
    if isinstance(items, list):
        where = message.metadata.get(TEXT)
        if isinstance(where, list) and where:
            holder, step = _at(items[where[0]], where[1:])
            holder[step] = message.content
        return items
    if message.role == "user" and message.parts:
        content = [_item_part(part) for part in message.parts]
        return [{"type": "message", "role": "user", "content": content}]
    return list(render([message], "openai_responses")["input"])


def _item_part(part: ContentPart) -> dict[str, Any]:
    """A part as an item's content part: the Responses shape, audio as the SDK's
    ``input_audio``."""
    return to_openai_chat(part) if isinstance(part, AudioPart) else to_responses_part(part)


def _bridge(role: Role, tool_call_id: str | None = None) -> Message:
    return Message(role=role, tool_call_id=tool_call_id, metadata={BRIDGE: True})


def with_bridges(messages: Sequence[Message], state: RoleState | None) -> list[Message]:
    """``messages`` with the bridges that let each follow ``state`` (the stored tail's).

    ``state=None``: the tail is unknown, so none before the first message.
    """
    out: list[Message] = []
    for message in messages:
        if state is None:
            state = RoleState(role=message.role, open=[c.id for c in message.tool_calls])
            out.append(message)
            continue
        if message.role != "tool":
            for call_id in list(state.open):
                out.append(_bridge("tool", call_id))
                state.advance(out[-1], check=False)
            if message.role == "user" and state.role not in ("", "system", "assistant"):
                out.append(_bridge("assistant"))
            elif message.role == "assistant" and state.role not in ("user", "tool"):
                out.append(_bridge("user"))
        out.append(message)
        state.advance(message, check=False)
    return out


@dataclass(frozen=True, slots=True)
class _Unsure:
    """An ``add_items`` call whose last append may have landed: what it was given (as the
    messages hold it), its messages and the batch last sent for them, bridges included."""

    key: bytes
    messages: list[Message]
    batch: list[Message]


@dataclass(frozen=True, slots=True)
class _Pop:
    """The write that pops an item: a rollback of ``ids`` or, when the message holding the
    item keeps others, a replace by ``kept`` fenced on ``ids``; named by ``op_id``, so that
    sending it again is applied once. ``holder`` is that message's id (``None``: bridges
    left alone at the tail, and ``item`` is ``None``)."""

    holder: str | None
    item: TResponseInputItem | None
    ids: list[str]
    op_id: str
    kept: list[Message] | None = None


def _pop_of(messages: list[Message], holders: list[int]) -> _Pop | None:
    """The pop of the latest item of ``messages`` (the tail, or the whole list when its holder
    keeps other items), whose ``holders`` hold items; ``None`` when there is nothing."""
    op_id = uuid.uuid4().hex
    if not holders:  # only bridges, or nothing: remove them, they bridge to nothing now
        return _Pop(None, None, [m.id for m in messages], op_id) if messages else None
    last = first = holders[-1]
    while first > 0 and messages[first - 1].metadata.get(BRIDGE) is True:
        first -= 1
    holder = messages[last]
    items = _items_of(holder)
    if len(items) == 1:
        return _Pop(holder.id, items[0], [m.id for m in messages[first:]], op_id)
    kept = [*messages[:last], _message(holder.role, items[:-1])]
    return _Pop(holder.id, items[-1], [m.id for m in messages], op_id, kept)


def _call_key(messages: Sequence[Message]) -> bytes:
    """What identifies an ``add_items`` call's items: its messages without ids or times."""
    return to_json([(m.role, m.content, m.parts, m.metadata) for m in messages])


class RedisHistorySession:
    """The Agents SDK's ``Session`` protocol on one redis-history conversation.

    ``Runner.run(agent, input, session=RedisHistorySession.from_url(url, "user-1"))``.
    The conversation stays a redis-history conversation: compaction, TTLs, rollback,
    snapshots and the wire formats work on it as on any other.
    """

    def __init__(
        self,
        history: AsyncRedisHistory,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        """Keep the session in ``history`` (its conversation id is the ``session_id``).

        Args:
            history: the asyncio history; it must check role order (``validate=True``,
                the default) for the bridges to be needed, and works without. The
                bridges make the SDK's order follow the strict role rules (the default
                ``roles``), which the lenient ones take too, so either works.
            session_settings: the SDK's settings; ``limit`` is ``get_items``'s default.
        """
        if isinstance(session_settings, Mapping):
            from agents.memory import SessionSettings as Settings  # noqa: PLC0415  (a dict only)

            session_settings = Settings(**session_settings)
        self.history = history
        self.session_id: str = history.conversation_id
        self.session_settings: SessionSettings | None = session_settings
        self._unsure: _Unsure | _Pop | None = None

    @classmethod
    def from_client(
        cls,
        client: Any,
        session_id: str,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Self:
        """A session on ``client`` (``redis.asyncio``); ``options`` go to the history."""
        history = AsyncRedisHistory(client, session_id, **options)
        return cls(history, session_settings=session_settings)

    @classmethod
    def from_url(
        cls,
        url: str,
        session_id: str,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Self:
        """A session on a new ``redis.asyncio`` client for ``url``."""
        client = redis.asyncio.Redis.from_url(url)
        return cls.from_client(client, session_id, session_settings=session_settings, **options)

    def _limit(self, limit: int | None) -> int | None:
        if limit is not None:
            return limit
        return None if self.session_settings is None else self.session_settings.limit

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in order; with ``limit``, the latest ``limit`` of them.

        ``limit`` defaults to ``session_settings.limit``. Reads the tail only, a window
        that doubles until it holds enough items.
        """
        limit = self._limit(limit)
        if limit is None:
            return to_items(await self.history.snapshot())
        if limit <= 0:
            return []
        window = limit
        while True:
            messages = await self.history.tail(window)
            items = to_items(messages)
            if len(items) >= limit or len(messages) < window:
                return items[-limit:]
            window *= 2

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` atomically: all of them are stored, or none.

        Repeating a call that raised with its outcome unknown (``StoreUnavailableError``,
        ``ReplicationError``, a cancelled task) stores the items once. A message's id is
        what the store recognises a repeated append by, and these items have none of their
        own, so this adapter keeps the failed call (its items, its messages with
        their ids, and the batch last sent, bridges included) until its next call. If that
        call is given the same items, it re-sends that batch: applied once if it had landed,
        appended now (bridged anew if the order needs it) if it had not. Any other next
        call, and a success, forget it, so identical items given later are new items, and
        stored again. The state concerns the retry of one call only, not the conversation,
        so it may live in the process: pods stay interchangeable.

        Raises:
            ToolPairingError: an output answers no open call; nothing was written.
            InvalidMessageError: an item is too large, or it or a call's ``arguments`` text
                nests deeper than ``MAX_NESTING``; nothing was written.
            ValueError: an item is not JSON data; nothing was written.
            StoreUnavailableError: Redis could not be reached; repeating the call is safe.
        """
        if not items:
            return
        messages = to_messages(items)
        key = _call_key(messages)
        unsure, self._unsure = self._unsure, None
        batch: list[Message] | None = None
        if isinstance(unsure, _Unsure) and unsure.key == key:
            messages, batch = unsure.messages, unsure.batch
        state: RoleState | None = None  # unknown: most calls need no bridge before them
        for attempt in range(ATTEMPTS + 1):
            if batch is None:
                batch = with_bridges(messages, state)
            try:
                await self.history.append_many(batch)
            except (RoleOrderError, ToolPairingError):
                # The SDK's order needs bridges after what is stored, or another writer moved
                # the tail since it was read, or the items break pairing: read it (again).
                if attempt == ATTEMPTS:
                    raise
                state, batch = await self._tail_state(), None
            except InvalidMessageError:
                raise  # refused: nothing was written
            except BaseException:
                self._unsure = _Unsure(key, messages, batch)  # it may have landed
                raise
            else:
                return

    async def _tail_state(self) -> RoleState:
        """The stored tail's role and open calls, from the latest assistant message on."""
        window = 8
        while True:
            messages = await self.history.tail(window)
            starts = [i for i, m in enumerate(messages) if m.role == "assistant"]
            if starts or len(messages) < window:
                break
            window *= 4
        if not starts:
            return RoleState(role=messages[-1].role if messages else "")
        return RoleState.of(messages[starts[-1] :])

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item; ``None`` when the session holds none.

        Fenced: removes the message holding it by id (a tool output reopens its call), by a
        write named with its own ``op_id``, so an item is returned at most once: when two
        pops race for it, one removes it and returns it, the other is refused and pops the
        item latest by then. A pop that raised with its outcome unknown
        (``StoreUnavailableError``, a cancelled task) is remembered by this adapter
        until its next call, as ``add_items`` remembers a call: the next ``pop_item`` sends
        the same write again and returns its item if it had landed or lands now.

        Raises:
            StaleSnapshotError: the latest item kept being refused (another writer kept
                changing the conversation right there).
        """
        unsure, self._unsure = self._unsure, None
        if isinstance(unsure, _Pop):
            with suppress(StaleSnapshotError):  # it had not landed, and its item is gone
                return await self._send(unsure)
        target: str | None = ""  # no message has this id
        refusals = 0
        while True:
            pop = await self._next_pop()
            if pop is None:
                return None
            try:
                return await self._send(pop)
            except StaleSnapshotError:
                # Another pop removed the item first, or another write moved the tail: read
                # the latest item again. Each such refusal is another writer's progress;
                # give up only when the same item keeps being refused.
                refusals = refusals + 1 if pop.holder == target else 1
                target = pop.holder
                if refusals == ATTEMPTS:
                    raise

    async def _next_pop(self) -> _Pop | None:
        """The write that pops the latest item, planned on the tail; on the whole list when
        the message holding it holds others (they stay, through a fenced replace)."""
        window = 8
        while True:
            messages = await self.history.tail(window)
            whole = len(messages) < window
            holders = [i for i, m in enumerate(messages) if _items_of(m)]
            if holders or whole:
                break
            window *= 4
        if holders and not whole and len(_items_of(messages[holders[-1]])) > 1:
            messages = await self.history.snapshot()
            holders = [i for i, m in enumerate(messages) if _items_of(m)]
        return _pop_of(messages, holders)

    async def _send(self, pop: _Pop) -> TResponseInputItem | None:
        """Send ``pop``'s write; remember it if its outcome is unknown."""
        try:
            if pop.kept is None:
                await self.history.rollback(pop.ids, op_id=pop.op_id, reopen_calls=True)
            else:
                await self.history.replace(pop.kept, expected_ids=pop.ids, op_id=pop.op_id)
        except StaleSnapshotError:
            raise  # refused: nothing was removed
        except BaseException:
            self._unsure = pop  # it may have landed
            raise
        return pop.item

    async def clear_session(self) -> None:
        """Delete the conversation (messages, archive, counters)."""
        self._unsure = None
        await self.history.delete()
