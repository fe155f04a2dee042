"""``python -m worker``: the same as ``redis-history worker`` (options and variables alike)."""

from __future__ import annotations

import sys

from redis_history.cli import main

sys.exit(main(["worker", *sys.argv[1:]]))
