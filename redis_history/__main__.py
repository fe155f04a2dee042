"""``python -m redis_history``: the command line."""

import sys

from redis_history.cli import main

sys.exit(main())
