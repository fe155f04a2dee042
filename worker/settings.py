"""RQ settings for ``rq worker -c worker.settings``, read from the ``REDIS_HISTORY_*`` variables.

An RQ settings module cannot choose the serializer or the worker class, so the
full command, run from the directory that holds ``worker/``, is::

    rq worker -c worker.settings \\
        --serializer rq.serializers.JSONSerializer \\
        --worker-class redis_history.compaction.jobs.CompactionWorker

``CompactionWorker`` runs only ``redis_history.compaction.jobs.compact_conversation`` and
refuses to start with any serializer but JSON. A plain ``rq worker`` would run
any function (and unpickle anything) a writer of the queue sends: never start
one on this queue. ``redis-history worker`` is the same worker without the flags.

``REDIS_HISTORY_URL`` is the history store, ``REDIS_HISTORY_QUEUE_URL`` the
queue's Redis (default: the store), ``REDIS_HISTORY_QUEUE`` the queue name, and
``REDIS_HISTORY_TENANTS`` the namespaces whose own queues the worker serves too (pass
``--dequeue-strategy round_robin`` so that no tenant's queue goes first); the job itself
reads the summarizer and the rest from the same variables
(``redis_history.settings.WorkerSettings.from_env``).
"""

from __future__ import annotations

from redis_history.settings import WorkerSettings

_settings = WorkerSettings.from_env()

REDIS_URL = _settings.queue_redis_url
QUEUES = list(_settings.queues)

# One line per job from redis_history.compaction.jobs, next to rq's own lines; rq's loggers are
# left alone.
DICT_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(name)s %(message)s", "datefmt": "%H:%M:%S"}},
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.stdout",
        }
    },
    "loggers": {"redis_history": {"handlers": ["stdout"], "level": "INFO", "propagate": False}},
}
