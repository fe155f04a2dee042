"""The deployable compaction worker: an RQ settings module and a ``python -m worker`` entry point.

Nothing in the ``redis_history`` package imports this directory; it is what a
deployment runs, from the directory that holds it (see ``settings.py``).
"""
