"""Memories that write themselves: durable facts extracted from a conversation's messages,
each message extracted once across any number of pods and workers.

An :class:`Extractor` turns messages into :class:`Fact` s: the offline
:class:`RuleExtractor` takes a user's first-person statements ("I moved to Porto" becomes
"Moved to Porto"), :class:`OpenAICompatibleExtractor` asks an LLM for structured output.
:class:`MemoryExtraction` runs one over the messages of a conversation not extracted yet and
stores what it finds in a long-term memory, with its provenance (the conversation, the ids of
the messages, the extractor, when).

A run holds the conversation's extraction claim (``SET NX PX``, a token of its own) while it
reads, extracts and stores; it then moves the conversation's cursor (the id of the last
message extracted) past what it read, in one script that checks it still holds the claim.
Two runs at once: the second finds the claim taken and returns at once. A run that dies
before it moves the cursor leaves the claim to expire; the next run extracts the same
messages again, and its facts merge into the memories the first stored (a memory's text
is stored once per owner), so no fact is kept twice. Compaction removes the oldest messages:
a cursor it removed means every message left is newer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, Unpack, runtime_checkable

from redis_history import settings
from redis_history.endpoints import EndpointClient, HttpSettings
from redis_history.errors import ExtractionError
from redis_history.memory.base import MemoryFilters
from redis_history.memory.redis_memory import RedisLongTermMemory, Stored
from redis_history.models import Message
from redis_history.plugins import PluginKind
from redis_history.store.history import RedisHistory
from redis_history.store.keys import ConversationKeys
from redis_history.wire.call import Call
from redis_history.wire.lane import send
from redis_history.wire.scripts import script

__all__ = [
    "EXTRACTION_LEASE_MS",
    "EXTRACTION_PROMPT",
    "EXTRACTORS",
    "Extracted",
    "Extractor",
    "Fact",
    "MemoryExtraction",
    "OpenAICompatibleExtractor",
    "RuleExtractor",
    "resolve_extractor",
]

T = TypeVar("T")

EXTRACTION_LEASE_MS = 120_000
"""How long a run holds a conversation's extraction claim: a run that dies is taken over
after this (a live run finishes well within it: one extractor call and one store)."""


ACTIONS = ("add", "update", "delete")
"""What an extractor may say of a fact (:attr:`Fact.action`)."""


@dataclass(frozen=True)
class Fact:
    """A durable fact, the ids of the messages it was found in, and what to do with it."""

    text: str
    message_ids: tuple[str, ...]
    action: str = "add"
    """``add``: remember it (a memory that says the same takes it in; with
    ``merge_similar``, one it updates is superseded); ``update``: it replaces the memory that
    says :attr:`replaces`, which is superseded; ``delete``: the memory that says it is no
    longer true and is forgotten."""
    replaces: str | None = None
    """For ``update``: the fact it replaces, as the memory states it (or near)."""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"a fact's action is one of {', '.join(ACTIONS)}, not {self.action!r}")
        if not isinstance(self.replaces, str | None):
            raise TypeError(f"a fact's replaces is a str or None, not {self.replaces!r}")


@runtime_checkable
class Extractor(Protocol):
    """Turns a conversation's new messages into facts worth remembering."""

    name: str
    """Recorded with each memory it makes (``extractor`` in the metadata)."""

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """The durable facts stated in ``messages`` (preferences, facts about the user,
        decisions, commitments), each with the ids of the messages it came from."""
        ...


EXTRACTION_PROMPT = """You read a conversation between a user and an assistant and list the
durable facts worth remembering about the user for later conversations: preferences, facts
about them and the people and things in their life, decisions, commitments. Leave out small
talk, questions, what the assistant said of itself, and anything true only for this moment.
Write each fact as one short sentence in the third person without a subject ("Lives in
Porto.", "Is allergic to peanuts."), and give the ids of the messages it comes from. The
action is "add" for a new fact; "update" when the user says a fact changed, with the old fact
in "replaces" ("I moved from Lisbon to Porto": text "Lives in Porto.", replaces "Lives in
Lisbon."); "delete" when the user says a fact is no longer true, with that fact as the text.
Answer with JSON only: {"facts": [{"text": "...", "message_ids": ["..."], "action": "add",
"replaces": null}]}; no facts: {"facts": []}."""
"""The system instruction of :class:`OpenAICompatibleExtractor`."""

_FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "message_ids": {"type": "array", "items": {"type": "string"}},
                    "action": {"type": "string", "enum": list(ACTIONS)},
                    "replaces": {"type": ["string", "null"]},
                },
                "required": ["text", "message_ids", "action", "replaces"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}


class OpenAICompatibleExtractor(
    EndpointClient, path="/chat/completions", what="extractor", error=ExtractionError
):
    """Facts from an OpenAI-compatible chat-completions endpoint, asked for as structured
    output (a JSON schema): one request per run, the messages given with their ids, retried
    as the summarizer's are; the API key is never shown by ``repr`` nor in an error. A fact
    naming no message it was given is credited to all the user's messages it was given."""

    def __init__(
        self,
        *,
        model: str = settings.SUMMARIZER_MODEL.default,
        prompt: str = EXTRACTION_PROMPT,
        **http: Unpack[HttpSettings],
    ) -> None:
        """Configure the endpoint (:class:`~redis_history.endpoints.HttpSettings`); nothing is
        sent yet.

        Raises:
            ValueError: an empty model, a URL that is not http(s), a bad timeout or retry
                setting.
        """
        if not model:
            raise ValueError("model must not be empty")
        super().__init__(**http)
        self.model = model
        self.prompt = prompt
        self.name = f"openai:{model}"
        """``openai:`` and the model, recorded with each memory it makes."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAICompatibleExtractor:
        """An extractor on the summarizer's endpoint and model (the
        ``REDIS_HISTORY_SUMMARIZER_*`` variables of :mod:`redis_history.settings`)."""
        env = os.environ if environ is None else environ
        http = cls.reached(env, settings.SUMMARIZER_BASE_URL, settings.SUMMARIZER_API_KEY_ENV)
        http["timeout"] = settings.SUMMARIZER_TIMEOUT.read(env)
        http["max_retries"] = settings.SUMMARIZER_MAX_RETRIES.read(env)
        return cls(model=settings.SUMMARIZER_MODEL.read(env), **http)

    def request_body(self, messages: Sequence[Message]) -> dict[str, Any]:
        """The JSON body sent to extract from ``messages``."""
        lines = [f"[{m.id}] {m.role}: {m.readable}" for m in messages]
        return {
            "model": self.model,
            "temperature": 0.0,
            "messages": [
                {"role": "system", "content": self.prompt},
                {"role": "user", "content": "Conversation:\n\n" + "\n".join(lines)},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "facts", "schema": _FACTS_SCHEMA, "strict": True},
            },
        }

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """Ask the endpoint for the facts of ``messages``.

        Raises:
            ExtractionError: an HTTP error or timeout that retries did not cure, or a reply
                whose ``choices[0].message.content`` is not the facts' JSON.
        """
        if not messages:
            return []
        data, raw, attempts = self._endpoint.post(self.request_body(messages))
        try:
            content = json.loads(data["choices"][0]["message"]["content"])
            found = [
                Fact(
                    str(f["text"]).strip(),
                    tuple(f["message_ids"]),
                    f.get("action") or "add",
                    f.get("replaces") or None,
                )
                for f in content["facts"]
            ]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            bad = self._endpoint.malformed(
                "has no facts JSON in choices[0].message.content", raw, attempts
            )
            raise bad from exc
        given = {m.id for m in messages}
        said = tuple(m.id for m in messages if m.role == "user")
        facts: list[Fact] = []
        for fact in found:
            named = tuple(dict.fromkeys(i for i in fact.message_ids if i in given))
            if fact.text:
                facts.append(replace(fact, message_ids=named or said))
        return facts


_SENTENCE = re.compile(r"(?<=[.!])\s+|\n+")
_OPENINGS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(rf"^{pattern}\b\s*", re.IGNORECASE), replacement)
    for pattern, replacement in (
        (r"i am|i'm", "Is "),
        (r"i have|i've", "Has "),
        (r"i don't|i do not", "Does not "),
        (r"i can't|i cannot", "Cannot "),
        (r"i will|i'll", "Will "),
        (r"my", "Their "),
        (r"i (never|always|usually|often|just|recently)", r"\1 "),
        (r"i (moved|started|stopped|switched|quit|bought|sold|married|joined|left)", r"\1 "),
        (r"i (live|work|prefer|like|love|hate|own|drive|speak|play|use|eat|drink|need)", r"\1s "),
        (r"i (study)", "Studies "),
    )
)
_PERSON = (("my", "their"), ("me", "them"), ("myself", "themselves"), ("mine", "theirs"))


_PLACE = r"[A-Z][\w'-]*(?: [A-Z][\w'-]*)*"
_MOVED = re.compile(
    rf"^[Ii] (?:just |recently |have |'ve )?moved (?:from (?P<old>{_PLACE}) )?to "
    rf"(?P<new>{_PLACE})[.!]*$"
)
"""A move and nothing more ("I moved from Lisbon to Porto."; not "... last year")."""


class RuleExtractor:
    """The offline extractor: each sentence of a user message that states something about
    the speaker ("I am", "I have", "I live", "I prefer", "My ... is", ...) becomes a fact in
    the third person; "I moved from Lisbon to Porto" becomes the update of "Lives in Lisbon."
    to "Lives in Porto."; questions and sentences of fewer than three words are left."""

    name = "rules"

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        facts: dict[str, Fact] = {}
        for message in messages:
            if message.role != "user":
                continue
            for sentence in _SENTENCE.split(message.text):
                fact = _moved(sentence.strip(), message.id) or _stated(sentence, message.id)
                if fact and fact.text.casefold() not in facts:
                    facts[fact.text.casefold()] = fact
        return list(facts.values())


def _stated(sentence: str, message_id: str) -> Fact | None:
    text = _third_person(sentence.strip())
    return None if text is None else Fact(text, (message_id,))


def _moved(sentence: str, message_id: str) -> Fact | None:
    """A move ("I moved from A to B") as "Lives in B.", updating "Lives in A." when A is
    said; a place is a capitalized name, and a sentence that says more is a statement as
    any other."""
    found = _MOVED.match(sentence)
    if found is None:
        return None
    new = f"Lives in {found['new']}."
    if found["old"]:
        return Fact(new, (message_id,), "update", f"Lives in {found['old']}.")
    return Fact(new, (message_id,))


def _third_person(sentence: str) -> str | None:
    """``sentence`` about the speaker, in the third person; ``None`` for any other."""
    if sentence.endswith("?") or len(sentence.split()) < 3:
        return None
    for opening, replacement in _OPENINGS:
        found = opening.match(sentence)
        if found:
            head = found.expand(replacement)
            rest = " ".join(_PERSONS.get(w.casefold(), w) for w in sentence[found.end() :].split())
            text = (head + rest).strip().rstrip(".!") + "."
            return text[:1].upper() + text[1:]
    return None


_PERSONS = dict(_PERSON)


EXTRACTORS: Mapping[str, Callable[[], Extractor]] = MappingProxyType(
    {
        "rules": RuleExtractor,
        "openai": OpenAICompatibleExtractor.from_env,
    }
)
"""Extractor names :func:`resolve_extractor` knows, each with the factory it calls."""


def _expected() -> str:
    return (
        "an Extractor (an object with name and extract(messages) -> list[Fact]), an alias "
        f"({', '.join(sorted(EXTRACTORS))}), or a dotted path 'package.module:attr' to an "
        "extractor, its class or a zero-argument factory"
    )


_KIND: PluginKind[Extractor] = PluginKind(Extractor, "Extractor", "extractor", "extract", _expected)


def resolve_extractor(spec: Extractor | str) -> Extractor:
    """The extractor ``spec`` names: an :class:`Extractor` as is, an alias of
    :data:`EXTRACTORS` (``rules``, ``openai``), or a dotted path.

    Raises:
        ValueError: a name that is no alias nor an importable path; an ``openai`` extractor
            with neither an API key nor a base URL.
        TypeError: what it names is not an extractor.
    """
    return _KIND.resolve(spec, EXTRACTORS)


@dataclass(frozen=True)
class Extracted:
    """What one :meth:`MemoryExtraction.extract` did."""

    messages: int
    """Messages it extracted from (0: nothing new, or another run holds the claim)."""
    facts: int
    """Facts the extractor found in them."""
    memory_ids: tuple[str, ...]
    """The memories they were stored as (a fact the owner had already merges into it); a
    delete has none."""
    busy: bool = False
    """Another run held the conversation's claim: nothing was done."""
    lost: bool = False
    """The claim ran out before the cursor moved: the facts are stored, the messages will be
    extracted again (and merge into the same memories)."""
    outcomes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """How many facts were ``added``, ``merged``, ``superseded`` (added, replacing a memory)
    or ``deleted`` (a memory forgotten)."""


class MemoryExtraction:
    """Extracts the facts of conversations into one long-term memory, for one agent."""

    def __init__(
        self,
        memory: RedisLongTermMemory,
        extractor: Extractor,
        agent_id: str,
        *,
        lease_ms: int = EXTRACTION_LEASE_MS,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """Store into ``memory`` what ``extractor`` finds, as memories of ``agent_id`` and
        the user each call names; a run holds a conversation's claim for ``lease_ms``."""
        if lease_ms < 1:
            raise ValueError(f"lease_ms must be at least 1, got {lease_ms!r}")
        self.memory = memory
        self.extractor = extractor
        self.agent_id = agent_id
        self.lease_ms = lease_ms
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)

    def extract(self, history: RedisHistory, user_id: str | None = None) -> Extracted:
        """Extract the messages of ``history`` not extracted yet (by any pod or worker) into
        memories of (``agent_id``, ``user_id``); see the module's docstring.

        Raises:
            EndpointError: the extractor failed (nothing stored, the claim released).
            HistoryError: a store was refused (the facts before it are kept).
        """
        keys = history.keys
        client = history.client
        token = uuid.uuid4().hex
        claimed = Call(bool, ("SET", keys.extract_claim, token, "NX", "PX", self.lease_ms))
        own = Call(lambda raw: raw == token.encode(), ("GET", keys.extract_claim))
        # a SET whose reply was lost and that redis-py sent again finds the claim its own
        if not _sent(client, claimed) and not _sent(client, own):
            return Extracted(0, 0, (), busy=True)
        moved = False
        try:
            last = _sent(client, Call(_text_or_none, ("HGET", keys.extraction, "last")))
            new = _after(history.snapshot(), last)
            if not new:
                return Extracted(0, 0, ())
            facts = self.extractor.extract(new)
            stored, outcomes = self._apply(facts, history.conversation_id, user_id)
            commit = _commit(keys, token, new[-1].id, len(new))
            moved = True
            held = bool(_sent(client, commit))
            return Extracted(len(new), len(facts), stored, lost=not held, outcomes=outcomes)
        finally:
            if not moved:  # nothing to move, or a failure: the claim is released
                release = _commit(keys, token, "", 0)
                with contextlib.suppress(Exception):  # else it runs out by itself
                    _sent(client, release)

    def _apply(
        self, facts: Sequence[Fact], conversation_id: str, user_id: str | None
    ) -> tuple[tuple[str, ...], Mapping[str, int]]:
        """Store the facts in order, with their provenance: an update supersedes the memory it
        replaces (when the owner has it), a delete forgets the memory that says it; the adds
        between two others go in one batch. Run again over the same facts (a run that died
        before its cursor moved), the memories end as they were: each fact merges into what
        the first run stored, an update supersedes the fact it replaces once more."""
        owner = MemoryFilters(self.agent_id, user_id)
        now = self._clock()

        def metadata(fact: Fact) -> dict[str, Any]:
            return {
                "agent_id": self.agent_id,
                "user_id": user_id,
                "conversation_id": conversation_id,
                "message_ids": list(fact.message_ids),
                "extractor": self.extractor.name,
                "extracted_ms": now,
            }

        done: list[Stored] = []
        deleted = 0
        adds: list[tuple[str, dict[str, Any]]] = []
        for fact in [*facts, None]:  # in order, the adds between two others in one batch
            if fact is not None and fact.action == "add":
                adds.append((fact.text, metadata(fact)))
                continue
            if adds:
                done += self.memory.remember_many(adds)
                adds = []
            if fact is None:
                break
            named = fact.text if fact.action == "delete" else fact.replaces
            old = self.memory.find(named, owner) if named else None
            if fact.action == "delete":
                if old is not None and old.memory_id is not None:
                    deleted += self.memory.forget(old.memory_id, owner)
            elif fact.replaces and old is not None and old.memory_id is not None:
                done.append(self.memory.supersede(old.memory_id, fact.text, metadata(fact)))
            else:  # an update of a fact the owner does not have is a fact of its own
                done.append(self.memory.remember(fact.text, metadata(fact)))
        outcomes = Counter(stored.outcome for stored in done)
        if deleted:
            outcomes["deleted"] = deleted
        return tuple(stored.memory_id for stored in done), MappingProxyType(dict(outcomes))


def _sent(client: Any, call: Call[T]) -> T:
    """``call`` sent through ``client``, its reply parsed."""
    return call.parse(send(client, call))


def _text_or_none(raw: Any) -> str | None:
    return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


def _after(messages: list[Message], last: str | None) -> list[Message]:
    """The messages after the one with id ``last``, summaries left out; all of them when
    ``last`` is ``None`` or gone (compaction removed it: every message left is newer)."""
    start = 0
    if last is not None:
        for index, message in enumerate(messages):
            if message.id == last:
                start = index + 1
                break
    return [m for m in messages[start:] if m.metadata.get("summary") is not True]


def _commit(keys: ConversationKeys, token: str, last: str, count: int) -> Call[int]:
    """The script moving the cursor to ``last`` (``""``: only release) if ``token`` still
    holds the claim."""
    lua = script("extract_commit")
    command = ("EVALSHA", lua.sha, 3, keys.extract_claim, keys.extraction, keys.meta)
    return Call(int, (*command, token, last, count), lua)
