# The redis-history image: the library and its CLI (`worker`, `demo`, `show`, ...) with the
# `metrics` extra (prometheus-client, for `worker --metrics-port`), plus the `worker/` settings
# module for `rq worker -c worker.settings` and `python -m worker` (run from /app).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY lua ./lua
COPY redis_history ./redis_history
RUN pip install ".[metrics]" && useradd --system --no-create-home --uid 10001 app
COPY worker ./worker

USER app
ENTRYPOINT ["redis-history"]
CMD ["worker"]
