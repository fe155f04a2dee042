"""The ``redis-history`` command line: ``demo`` and ``show``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from redis_history.demo import redis_for_demo, run_demo
from redis_history.errors import ConversationNotFound, HistoryError
from redis_history.history import RedisHistory
from redis_history.keys import DEFAULT_NAMESPACE

__all__ = ["main"]

URL_ENV = "REDIS_HISTORY_URL"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="redis-history", description="LLM agent conversation history in Redis."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="simulated agent pods sharing conversations, with the invariants checked",
        description="Without --redis-url or $REDIS_HISTORY_URL an embedded Redis is started.",
    )
    demo.add_argument("--redis-url", help=f"Redis to use (default: ${URL_ENV}, else embedded)")
    demo.add_argument("--pods", type=int, default=4, help="simulated agent processes")
    demo.add_argument("--conversations", type=int, default=3)
    demo.add_argument("--turns", type=int, default=30, help="turns per pod")
    show = commands.add_parser("show", help="print a conversation's messages as JSON lines")
    show.add_argument("conversation_id")
    show.add_argument("--namespace", default=DEFAULT_NAMESPACE)
    show.add_argument("--redis-url", help=f"Redis to read (default: ${URL_ENV})")
    show.add_argument("--transcript", action="store_true", help="include archived originals")
    return parser


def _show(args: argparse.Namespace) -> int:
    url = args.redis_url or os.environ.get(URL_ENV) or "redis://127.0.0.1:6379/0"
    history = RedisHistory.from_url(url, args.conversation_id, namespace=args.namespace)
    messages = history.transcript() if args.transcript else history.snapshot()
    if not messages and not history.client.exists(*history.keys.data):
        raise ConversationNotFound(
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
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            with redis_for_demo(args.redis_url) as url:
                report = run_demo(
                    url, pods=args.pods, conversations=args.conversations, turns=args.turns
                )
            return 0 if report.ok else 1
        return _show(args)
    except (HistoryError, ValueError) as exc:
        print(f"redis-history: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
