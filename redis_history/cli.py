"""The ``redis-history`` command line: ``demo``, ``show`` and ``worker``.

An expected failure (Redis unreachable or not Redis, refused credentials, an ACL
refusal, bad arguments or settings, an unknown conversation) prints one line to
stderr, secrets masked, and exits with its own status (:data:`EXIT_STATUSES`);
only a bug prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from redis_history import settings
from redis_history.demo.run import DemoError, redis_for_demo, run_demo
from redis_history.demo.server import RedisServerError
from redis_history.errors import (
    AccessDeniedError,
    ConversationNotFoundError,
    HistoryError,
    StoreUnavailableError,
)
from redis_history.settings import WorkerSettings
from redis_history.store._core import RedisFailure, redis_error
from redis_history.store.history import RedisHistory
from redis_history.store.keys import DEFAULT_NAMESPACE

__all__ = ["EXIT_STATUSES", "main"]

URL_ENV = settings.URL.name

EXIT_STATUSES: tuple[tuple[type[BaseException], int, str], ...] = (
    (AccessDeniedError, 5, "Redis refused the credentials, or its ACL denied a key or command"),
    (StoreUnavailableError, 4, "Redis unreachable, or not a Redis server"),
    (ConversationNotFoundError, 3, "no such conversation"),
    (ValueError, 2, "bad arguments, environment variables or setup"),
    (DemoError, 2, "bad arguments, environment variables or setup"),
    (RedisServerError, 2, "bad arguments, environment variables or setup"),
    (HistoryError, 1, "the demo found a broken invariant, or Redis refused an operation"),
    (KeyboardInterrupt, 130, "interrupted"),
)
"""The exit status of each expected failure, first match first, and what it means."""
_EXPECTED: tuple[type[BaseException], ...] = (
    *RedisFailure,
    *(kind for kind, _, _ in EXIT_STATUSES),
)
"""What the command line reports in one line: those, and redis-py's errors left untyped."""


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
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="simulated agent pods sharing conversations, with the invariants checked",
        description="Without --redis-url or $REDIS_HISTORY_URL an embedded Redis is started.",
        **layout,
    )
    demo.add_argument("--redis-url", help=f"Redis to use (default: ${URL_ENV}, else embedded)")
    demo.add_argument("--pods", type=int, default=4, help="simulated agent processes")
    demo.add_argument("--conversations", type=int, default=3)
    demo.add_argument("--turns", type=int, default=30, help="turns per pod")
    demo.add_argument(
        "--workers", type=int, default=2, help="compaction workers to start (0: use running ones)"
    )
    demo.add_argument(
        "--queue",
        default=settings.QUEUE.read(),
        help="the compaction queue (default: $REDIS_HISTORY_QUEUE, else %(default)s)",
    )
    show = commands.add_parser(
        "show", help="print a conversation's messages as JSON lines", **layout
    )
    show.add_argument("conversation_id")
    show.add_argument("--namespace", default=DEFAULT_NAMESPACE)
    show.add_argument("--redis-url", help=f"Redis to read (default: ${URL_ENV})")
    show.add_argument("--transcript", action="store_true", help="include archived originals")
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
    return parser


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
    }
    env.update({key: value for key, value in overrides.items() if value is not None})
    worker_class = SimpleCompactionWorker if args.no_fork else CompactionWorker
    run_worker(WorkerSettings.from_env(env), args.burst, name=args.name, worker_class=worker_class)
    return 0


def _show(args: argparse.Namespace) -> int:
    url = args.redis_url or settings.URL.read()
    history = RedisHistory.from_url(url, args.conversation_id, namespace=args.namespace)
    messages = history.transcript() if args.transcript else history.snapshot()
    if not messages and not history.client.exists(*history.keys.data):
        raise ConversationNotFoundError(
            "no such conversation",
            conversation_id=args.conversation_id,
            namespace=args.namespace,
        )
    for message in messages:
        print(json.dumps(message.to_openai(), ensure_ascii=False))
    estimate = history.token_estimate()
    print(f"# {len(messages)} messages, token estimate {estimate}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (:data:`EXIT_STATUSES`)."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except _EXPECTED as exc:
        error = redis_error(exc) if isinstance(exc, RedisFailure) else exc
        code = next(code for kind, code, _ in EXIT_STATUSES if isinstance(error, kind))
        urls = (getattr(args, "redis_url", None), getattr(args, "queue_url", None))
        text = " ".join(settings.redactor(urls)(str(error) or type(error).__name__).split())
        print(f"redis-history: {text}", file=sys.stderr)
        return code


def _run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        with redis_for_demo(args.redis_url) as url:
            report = run_demo(
                url,
                pods=args.pods,
                conversations=args.conversations,
                turns=args.turns,
                workers=args.workers,
                queue_name=args.queue,
            )
        return 0 if report.ok else 1
    if args.command == "worker":
        return _worker(args)
    return _show(args)


if __name__ == "__main__":
    sys.exit(main())
