"""Everything public is documented: each name a public module exports, and each public method,
property, field and option of it, is named in code in README.md or a page of docs/.

The public modules are the package's top level and the modules the docs' examples import from
(``redis_history/__init__.py``: the others are internal). A name counts as documented when a
code block or an inline code span of a page holds it; a member (method, property, field,
keyword option) when some code holds ``Class.member``, or when a section of a page (heading
to heading) that names its class in code uses it there: a method as ``.member(``, a field or
an option as ``member=``, ``.member``, ``"member"`` or an inline span of its own. An
asyncio twin shares its sync twin's members, and a protocol the classes that implement it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, is_typeddict

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PUBLIC_MODULES = (
    "redis_history",
    "redis_history.admin",
    "redis_history.compaction.compactors",
    "redis_history.compaction.jobs",
    "redis_history.context",
    "redis_history.integrations.langchain",
    "redis_history.integrations.openai_agents",
    "redis_history.memory",
    "redis_history.memory.extraction",
    "redis_history.parts",
    "redis_history.testing",
)
"""The modules whose ``__all__`` is public: the top level, and each module a page's example
imports from (a test below keeps the two lists the same)."""

NOT_FOR_USERS: dict[str, str] = {
    # The store's read plumbing in redis_history.parts: context variables through which a
    # read fetches the data kept outside the message list; outside a store's read they raise
    # or do nothing.
    "blob_data": "a store read's blob context",
    "blobs_at_hand": "a store read's blob context",
    "stored_data": "a store read's blob context",
    "mislabeled": "the check the store's writes and reads share",
    "ImagePart.blob": "set by the store's reads only, never on a part a read returns",
    "FilePart.blob": "set by the store's reads only, never on a part a read returns",
    "AudioPart.blob": "set by the store's reads only, never on a part a read returns",
    # The endpoint clients' class-statement settings, and the helper their from_env uses.
    "OpenAICompatibleSummarizer.PATH": "set by the class statement",
    "OpenAICompatibleSummarizer.WHAT": "set by the class statement",
    "OpenAICompatibleSummarizer.ERROR": "set by the class statement",
    "OpenAICompatibleSummarizer.reached": "from_env's reading of the variables",
    "OpenAICompatibleExtractor.PATH": "set by the class statement",
    "OpenAICompatibleExtractor.WHAT": "set by the class statement",
    "OpenAICompatibleExtractor.ERROR": "set by the class statement",
    # The sync/asyncio twins' runner hooks (redis_history.wire.twins): each operation sends
    # its calls through them; a user calls the operations.
    "RedisHistory.execute": "the twins' runner hook",
    "RedisHistory.run": "the twins' runner hook",
    "AsyncRedisHistory.execute": "the twins' runner hook",
    "AsyncRedisHistory.run": "the twins' runner hook",
    "HistoryManager.run": "the twins' runner hook",
    "AsyncHistoryManager.run": "the twins' runner hook",
}
"""What is public in Python but not for users, each with the reason it needs no page."""

FENCE = re.compile(r"^\s*```")
HEADING = re.compile(r"^#{1,6} ")
INLINE = re.compile(r"`([^`\n]+)`")
IMPORT = re.compile(r"^\s*from (redis_history[\w.]*) import", re.MULTILINE)


@dataclass(frozen=True)
class Section:
    """The code of one section of a page (from a heading to the next): its fenced blocks and
    its inline spans."""

    where: str
    code: str
    """Every fenced block and inline span of the section, one after another."""
    spans: frozenset[str]
    """The inline code spans, stripped."""

    def names(self, identifier: str) -> bool:
        return re.search(rf"(?<![\w.]){re.escape(identifier)}(?!\w)", self.code) is not None

    def has(self, pattern: str) -> bool:
        return re.search(pattern, self.code) is not None


def sections(page: Path) -> list[Section]:
    """The sections of ``page``; a ``#`` line in a code block is code, not a heading."""
    found: list[Section] = []
    heading, inside = page.name, False
    fenced: list[str] = []
    prose: list[str] = []

    def close() -> None:
        spans = [span.strip() for span in INLINE.findall("\n".join(prose))]
        found.append(Section(heading, "\n".join([*fenced, *spans]), frozenset(spans)))

    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            inside = not inside
        elif inside:
            fenced.append(line)
        elif HEADING.match(line):
            close()
            heading, fenced, prose = f"{page.name}: {line}", [], [line]
        else:
            prose.append(line)
    close()
    return found


SECTIONS = [section for page in PAGES for section in sections(page)]


@dataclass(frozen=True)
class Member:
    """A public member of one or more public classes, or an option of a public callable."""

    owners: tuple[str, ...]
    """The public classes (or the function) it belongs to; documenting it on one will do
    (an asyncio twin shares its sync twin's methods)."""
    within: str
    """For an option of a method, the method."""
    name: str
    kind: str
    """``method``, ``attribute`` (a property, a field) or ``option`` (a keyword parameter)."""

    def __str__(self) -> str:
        where = f"{self.owners[0]}.{self.within}" if self.within else self.owners[0]
        return f"{where}({self.name}=)" if self.kind == "option" else f"{where}.{self.name}"


def ours(cls: type) -> bool:
    return cls.__module__.startswith("redis_history")


def exported() -> dict[str, Any]:
    """Each public name, qualified by the first public module that exports it, with its object."""
    found: dict[str, Any] = {}
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if id(obj) in seen and (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            found[name] = obj
    return found


def fields(cls: type) -> list[str]:
    """The fields of a dataclass, a pydantic model, a TypedDict or a NamedTuple."""
    if dataclasses.is_dataclass(cls):
        return [field.name for field in dataclasses.fields(cls) if not field.name.startswith("_")]
    if issubclass(cls, BaseModel):
        return list(cls.model_fields)
    if is_typeddict(cls):
        return list(cls.__annotations__)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return list(cls._fields)
    return []


def options(function: Callable[..., Any]) -> list[str]:
    """The keyword options of a callable: its keyword-only parameters and those with a default."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []
    return [
        parameter.name
        for parameter in signature.parameters.values()
        if not parameter.name.startswith("_")
        and (
            parameter.kind is inspect.Parameter.KEYWORD_ONLY
            or (
                parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                and parameter.default is not inspect.Parameter.empty
            )
        )
    ]


def defining(cls: type, name: str) -> type:
    """The package class furthest up ``cls``'s MRO that defines ``name``: twins share it."""
    return [base for base in cls.__mro__ if ours(base) and name in vars(base)][-1]


def foreign(cls: type, name: str) -> bool:
    """Whether ``name`` is another library's: pydantic's, an exception's, or what a class of
    another library that ``cls`` extends defines (rq's workers, LangChain's chat history),
    which that library documents."""
    return hasattr(BaseModel, name) or any(
        not ours(base) and base is not object and name in vars(base) for base in cls.__mro__
    )


def implementers(protocol: type, surface: dict[str, Any]) -> list[str]:
    """The public classes that have every member of ``protocol``: documenting a member on
    one of them documents the protocol's."""
    wanted = {name for name in vars(protocol) if not name.startswith("_")}
    return [
        name
        for name, obj in surface.items()
        if inspect.isclass(obj) and obj is not protocol and all(hasattr(obj, w) for w in wanted)
    ]


def defined(cls: type) -> list[tuple[str, Any]]:
    """The public names the package's classes in ``cls``'s MRO define, with their values;
    not fields, nor another library's names."""
    own = fields(cls)
    return [
        (name, value)
        for base in cls.__mro__
        if ours(base)
        for name, value in vars(base).items()
        if not name.startswith("_") and name not in own and not foreign(cls, name)
    ]


def members(surface: dict[str, Any]) -> list[Member]:
    """Every public method, property, field and keyword option of the public surface."""
    shared: dict[tuple[object, str, str, str], list[str]] = {}

    def add(where: object, within: str, name: str, kind: str, owners: list[str]) -> None:
        known = shared.setdefault((where, within, name, kind), [])
        known += [owner for owner in owners if owner not in known]

    protocols = {
        obj: implementers(obj, surface)
        for obj in surface.values()
        if inspect.isclass(obj) and getattr(obj, "_is_protocol", False)
    }

    def home(cls: type, name: str) -> object:
        """Where ``name`` of ``cls`` is documented: the protocol it implements, if one has
        it, or the package class that first defines it."""
        for protocol, classes in protocols.items():
            if name in vars(protocol) and (cls is protocol or cls.__name__ in classes):
                return protocol
        return defining(cls, name)

    for owner, obj in surface.items():
        if inspect.isfunction(obj):
            for option in options(obj):
                add(obj, "", option, "option", [owner])
        if not inspect.isclass(obj):
            continue
        owners = [owner, *protocols.get(obj, [])]
        own = fields(obj)
        for name in own:
            add(obj, "", name, "attribute", owners)
        if not own and any(ours(base) and "__init__" in vars(base) for base in obj.__mro__):
            kind = "attribute" if issubclass(obj, Exception) else "option"
            for option in options(obj):
                add(defining(obj, "__init__"), "", option, kind, owners)
        for name, value in defined(obj):
            where = home(obj, name)
            attribute = getattr(obj, name, None)
            if isinstance(value, property) or inspect.isclass(attribute) or not callable(attribute):
                add(where, "", name, "attribute", owners)
                continue
            add(where, "", name, "method", owners)
            for option in options(attribute):
                add(where, name, option, "option", owners)
    return [Member(tuple(owners), *key[1:]) for key, owners in shared.items()]


def documented_name(name: str) -> bool:
    return any(section.names(name) for section in SECTIONS)


def documented_member(member: Member) -> bool:
    """Whether some code names ``Owner.member``, or a section that names an owner in code
    uses the member there."""
    name = member.name
    uses = {
        "method": rf"\.{name}\(",
        "attribute": rf"(\.{name}(?!\w)|(?<![\w.]){name}=|\"{name}\")",
        "option": rf"(?<![\w.]){name}=",
    }[member.kind]
    for section in SECTIONS:
        if member.kind != "option" and any(
            section.names(f"{owner}.{name}") for owner in member.owners
        ):
            return True
        if any(section.names(owner) for owner in member.owners) and (
            section.has(uses) or (member.kind != "method" and name in section.spans)
        ):
            return True
    return False


def test_the_public_modules_are_the_ones_the_docs_import_from() -> None:
    """Each module a page's code imports from is listed as public (so its ``__all__`` is
    checked), and each listed module is one a page imports from."""
    imported = {
        found
        for page in PAGES
        for found in IMPORT.findall(page.read_text(encoding="utf-8"))
        if found != "redis_history"
    }
    assert imported == set(PUBLIC_MODULES) - {"redis_history"}


def test_the_surface_is_what_the_package_exports() -> None:
    """The lists the other tests check are not empty by mistake: every public module has an
    ``__all__``, and the classes bring their methods, fields and options."""
    surface = exported()
    kinds = {member.kind for member in members(surface)}
    assert {"HistoryManager", "RedisHistory", "HistoryOptions", "WorkerSettings"} <= set(surface)
    assert kinds == {"method", "attribute", "option"}
    assert set(NOT_FOR_USERS) <= {
        f"{owner}.{member.name}" for member in members(surface) for owner in member.owners
    } | set(surface), "an allow-list entry names nothing public"


def test_every_public_name_is_documented() -> None:
    """Each name a public module exports is named in code in README.md or docs/."""
    missing = [
        name for name in exported() if name not in NOT_FOR_USERS and not documented_name(name)
    ]
    assert not missing, f"no page names these in code: {', '.join(missing)}"


def test_every_public_method_field_and_option_is_documented() -> None:
    """Each public method, property, field and keyword option of a public class or function
    is named in code (``Class.member``, or used in a section that names its class)."""
    missing = [
        str(member)
        for member in members(exported())
        if not any(f"{owner}.{member.name}" in NOT_FOR_USERS for owner in member.owners)
        and not documented_member(member)
    ]
    assert not missing, "no page documents these (see docs/reference.md):\n" + "\n".join(missing)
