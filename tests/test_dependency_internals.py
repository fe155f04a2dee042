"""What the package relies on in redis-py, rq and pydantic below their public API, checked on
the installed versions.

Each check looks at exactly the shape one module relies on (a method it overrides and its
parameters, an attribute it reads or sets, the dict a generated schema is) and, when that
shape changed, fails naming the dependency, its installed version, what changed and where the
package relies on it. Each check is also run on stand-ins altered as an upgrade could alter
the dependency, where it must fail: the checks can fail. What the reliance is for is tested
elsewhere (tests/test_jobs.py, tests/test_worker_outages.py, tests/test_lane.py,
tests/test_envelopes.py ...); docs/internals.md lists each one and why no public mechanism
serves.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.metadata
import importlib.util
import inspect
import pkgutil
import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.utils
from hiredis import pack_command
from redis.credentials import UsernamePasswordCredentialProvider
from rq.job import Job
from rq.logutils import setup_loghandlers
from rq.serializers import JSONSerializer, resolve_serializer
from rq.worker import BaseWorker, SimpleWorker, Worker, WorkerStatus

from redis_history.compaction import jobs
from redis_history.compaction.jobs import (
    CompactionOnlyJob,
    CompactionWorker,
    SimpleCompactionWorker,
)
from redis_history.models import Message
from redis_history.store.codec import Entry
from redis_history.wire import lane as _lane

JOBS = "redis_history/compaction/jobs.py"
LANE = "redis_history/store/_lane.py"
STORED = "redis_history/store/_stored.py"
REDACT = "redis_history/redact.py"


class Changed(AssertionError):
    """A dependency no longer has the shape the package relies on."""


def installed(dist: str) -> str:
    """``dist``'s installed version (pydantic's with the pydantic-core it generates for)."""
    version = importlib.metadata.version(dist)
    if dist == "pydantic":
        version += f" (pydantic-core {importlib.metadata.version('pydantic-core')})"
    return version


def changed(dist: str, what: str, where: str) -> Changed:
    """The failure naming ``dist``, its installed version, ``what`` changed and ``where``."""
    return Changed(f"{dist} {installed(dist)} changed {what}: {where}")


def _default(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 12 else "..."


def shape(name: str, func: Any) -> str:
    """``name(params)`` as a signature reads, without ``self`` and annotations."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return f"{name}(?)"
    if params and params[0].name == "self":
        params = params[1:]
    parts: list[str] = []
    star = False
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star = True
        elif p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            if p.kind is p.KEYWORD_ONLY and not star:
                parts.append("*")
                star = True
            default = "" if p.default is p.empty else f"={_default(p.default)}"
            parts.append(f"{p.name}{default}")
    return f"{name}({', '.join(parts)})"


def _params(func: Any) -> list[tuple[str, Any, bool]]:
    return [
        (p.name, p.kind, p.default is not p.empty)
        for p in inspect.signature(func).parameters.values()
    ]


# -- the checks ---------------------------------------------------------------------------------


def overridden(dist: str, base: Any, name: str, ours: Any, where: str) -> None:
    """``base.name`` is a function with the parameters of ``ours``, which overrides it."""
    what = f"{base.__name__}.{shape(name, ours)}"
    theirs = inspect.getattr_static(base, name, None)
    if not inspect.isfunction(theirs):
        now = "gone" if theirs is None else repr(theirs)
        raise changed(dist, f"{what}, now {now}", where)
    if _params(theirs) != _params(ours):
        raise changed(dist, f"{what}, now {shape(name, theirs)}", where)


def a_property(dist: str, owner: Any, name: str, where: str) -> None:
    """``owner.name`` is a property (which a subclass's property replaces)."""
    found = inspect.getattr_static(owner, name, None)
    if not isinstance(found, property):
        now = "gone" if found is None else f"a {type(found).__name__}"
        raise changed(dist, f"{owner.__name__}.{name} (a property), now {now}", where)


def accepts(
    dist: str,
    owner: Any,
    name: str,
    where: str,
    /,
    *args: Any,
    coroutine: bool = False,
    **kwargs: Any,
) -> None:
    """``owner.name(*args, **kwargs)`` binds (a method of a class, or of an instance), and is a
    coroutine function when ``coroutine``."""
    label = owner.__name__ if inspect.isclass(owner) else type(owner).__name__
    call = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    what = f"{label}.{name}, called as {name}({call})"
    member = getattr(owner, name, None)
    if not callable(member):
        raise changed(dist, f"{what}: it is gone", where)
    bound = (None, *args) if inspect.isclass(owner) else args
    try:
        inspect.signature(member).bind(*bound, **kwargs)
    except TypeError:
        raise changed(dist, f"{what}: it is now {shape(name, member)}", where) from None
    if coroutine and not inspect.iscoroutinefunction(inspect.unwrap(member)):
        # (unwrapped: redis-py 6 wraps some coroutine methods in a plain deprecation wrapper)
        raise changed(dist, f"{what}: it is no longer a coroutine function", where)


def has_attributes(dist: str, obj: Any, expected: dict[str, Any], where: str) -> None:
    """``obj`` has each attribute of ``expected``: ``None`` for one that must be ``None``,
    else a type its value must be an instance of."""
    for name, kind in expected.items():
        if not hasattr(obj, name):
            raise changed(dist, f"{type(obj).__name__}.{name}: it is gone", where)
        value = getattr(obj, name)
        if kind is None and value is not None:
            raise changed(dist, f"{type(obj).__name__}.{name}: it is {value!r}, not None", where)
        if kind is not None and not isinstance(value, kind):
            now = type(value).__name__
            raise changed(dist, f"{type(obj).__name__}.{name}: a {now}, not a {kind}", where)


def not_taken(dist: str, owners: Sequence[Any], names: set[str], where: str) -> None:
    """None of ``owners`` (classes or instances) has an attribute named like one of ours."""
    for owner in owners:
        taken = sorted(n for n in names if hasattr(owner, n))
        if taken:
            label = owner.__name__ if inspect.isclass(owner) else type(owner).__name__
            raise changed(dist, f"{label}: it now has {', '.join(taken)} of its own", where)


# -- rq ------------------------------------------------------------------------------------------

WORKER_OVERRIDES = {
    BaseWorker: (
        "heartbeat",
        "set_state",
        "maintain_heartbeats",
        "check_for_suspension",
        "run_maintenance_tasks",
        "execute_job",
        "set_shutdown_requested_date",
        "register_death",
        "subscribe",
        "unsubscribe",
        "handle_exception",
        "handle_job_failure",
    ),
    Worker: ("main_work_horse",),
}
"""RQ worker methods the compaction workers override: riding out outages, redacting job
errors, the forked horse's GC, the command listener's handler."""
JOB_PROPERTIES = ("func", "success_callback", "failure_callback", "stopped_callback")
"""``Job`` properties ``CompactionOnlyJob`` replaces: the allowlist and the callbacks never
imported."""
JOB_OVERRIDES = ("send_webhooks",)
RQ_ATTRIBUTES = {"max_connection_wait_time", "pubsub", "pubsub_thread"}
"""RQ attributes the compaction workers set or override on purpose (besides the methods)."""
OUR_CLASSES = (CompactionOnlyJob, CompactionWorker, SimpleCompactionWorker)


def our_names() -> set[str]:
    """Every attribute the jobs module's RQ subclasses define or assign on ``self``: their
    methods, class attributes and instance attributes (read from the module's source)."""
    classes = {klass for cls in OUR_CLASSES for klass in cls.__mro__}
    ours = {klass.__name__ for klass in classes if klass.__module__ == jobs.__name__}
    names = {
        name
        for klass in classes
        if klass.__name__ in ours
        for name in vars(klass)
        if not (name.startswith("__") and name.endswith("__"))
    }
    tree = ast.parse(Path(jobs.__file__).read_text(encoding="utf-8"))
    bodies = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in ours]
    for node in (inner for body in bodies for inner in ast.walk(body)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
    return names


def intended() -> set[str]:
    """The names of RQ's the jobs module overrides or sets on purpose."""
    return {
        *(name for names in WORKER_OVERRIDES.values() for name in names),
        *JOB_PROPERTIES,
        *JOB_OVERRIDES,
        *RQ_ATTRIBUTES,
    }


def plain_worker() -> SimpleWorker:
    """RQ's own worker, as constructed for a compaction queue (no connection is made)."""
    return SimpleWorker(["q"], connection=fakeredis.FakeRedis(), serializer=JSONSerializer)


def check_worker_override(base: Any, name: str) -> None:
    ours = getattr(CompactionWorker, name)
    assert ours.__module__ == jobs.__name__, f"{name} is no longer overridden in {JOBS}"
    overridden("rq", base, name, ours, f"{JOBS} overrides it")


def check_worker_init(base: Any) -> None:
    where = f"{JOBS} constructs its workers with these"
    accepts(
        "rq",
        base,
        "__init__",
        where,
        ["q"],
        name="w",
        connection=None,
        job_class=CompactionOnlyJob,
        serializer=JSONSerializer,
    )


def check_worker_attributes(worker: Any) -> None:
    """What the workers read and set: the command listener's pubsub and thread, the
    executions a lost job is cleared from, the state, the logger, the command channel."""
    where = f"{JOBS} reads and sets them"
    has_attributes(
        "rq",
        worker,
        {"pubsub": None, "pubsub_thread": None, "executions": dict, "pubsub_channel_name": str},
        where,
    )
    accepts("rq", worker, "handle_payload", f"{JOBS} subscribes it to the channel", {})
    accepts("rq", worker, "get_state", f"{JOBS} asks whether a job runs")
    if not isinstance(getattr(worker, "log", None), type(jobs.logger)):
        raise changed("rq", f"{type(worker).__name__}.log, a logging.Logger", where)


def check_connection_backoff(base: Any) -> None:
    value = getattr(base, "max_connection_wait_time", None)
    if not isinstance(value, float):
        raise changed(
            "rq",
            f"{base.__name__}.max_connection_wait_time (a float), now {value!r}",
            f"{JOBS} caps its dequeue backoff with it",
        )


def check_statuses(status: Any) -> None:
    for name in ("BUSY", "IDLE"):
        if not hasattr(status, name):
            raise changed("rq", f"WorkerStatus.{name}: it is gone", f"{JOBS} sets and reads it")


def check_job_property(owner: Any, name: str) -> None:
    a_property("rq", owner, name, f"{JOBS} (CompactionOnlyJob) replaces it")


def check_job_override(owner: Any, name: str) -> None:
    ours = getattr(CompactionOnlyJob, name)
    overridden("rq", owner, name, ours, f"{JOBS} (CompactionOnlyJob) overrides it")


def check_perform_uses_func(job_class: Any) -> None:
    """RQ's ``perform`` reaches the job's function through ``func`` alone, which is where
    ``CompactionOnlyJob`` refuses before anything is imported."""

    class Probe(job_class):  # type: ignore[misc]
        @property
        def func(self) -> Any:
            return lambda *args, **kwargs: "through func"

    job = Probe.create("os.getcwd", connection=fakeredis.FakeRedis(), serializer=JSONSerializer)
    if job.perform() != "through func":
        raise changed(
            "rq",
            "Job.perform, which no longer calls the function Job.func returns",
            f"{JOBS} (CompactionOnlyJob) refuses other functions in func",
        )


def check_our_names_are_free(owners: Sequence[Any]) -> None:
    where = (
        f"{JOBS} defines them on its RQ subclasses (an override meant there is to be "
        "checked here, in WORKER_OVERRIDES)"
    )
    not_taken("rq", owners, our_names() - intended(), where)


def check_serializers(resolve: Callable[[Any], Any]) -> None:
    where = f"{JOBS} refuses any serializer but JSON with it"
    for name in ("json", "rq.serializers.JSONSerializer", JSONSerializer):
        if resolve(name) is not JSONSerializer:
            raise changed("rq", f"resolve_serializer({name!r}), no longer JSONSerializer", where)


def check_loghandlers(setup: Any) -> None:
    where = f"{JOBS} sets up its loggers with it"
    signature = inspect.signature(setup)
    if "level" not in signature.parameters or "name" not in signature.parameters:
        raise changed("rq", f"setup_loghandlers(level, name=...), now {shape('', setup)}", where)


# -- redis-py -----------------------------------------------------------------------------------

POOLS = (redis.ConnectionPool, redis.asyncio.ConnectionPool)


def check_lane_attribute_is_free(pool_class: Any) -> None:
    """A pool takes the lane's attribute: its class has none of that name, and instances
    have a ``__dict__``."""
    name = _lane._ATTRIBUTE
    where = f"{LANE} keeps a pool's lane in the pool's attribute {name}"
    if any(name in vars(klass) for klass in pool_class.__mro__):
        raise changed("redis", f"{pool_class.__name__}, which now has an attribute {name}", where)
    pool = pool_class()
    if not hasattr(pool, "__dict__") or name in vars(pool):
        raise changed("redis", f"{pool_class.__name__}, whose pools take no {name}", where)


def check_pool_calls(pool_class: Any, asyncio: bool) -> None:
    where = f"{LANE} borrows lane connections with these"
    accepts("redis", pool_class, "get_connection", where, coroutine=asyncio)
    accepts("redis", pool_class, "release", where, object(), coroutine=asyncio)
    if importlib.util.find_spec("redis.maint_notifications"):  # redis-py 7 and later
        accepts("redis", pool_class, "maint_notifications_enabled", where)
    has_attributes(
        "redis", pool_class(), {"max_connections": int, "connection_kwargs": dict}, where
    )


def check_blocking_pool_is_told_apart(pools: tuple[Any, Any]) -> None:
    """A ``BlockingConnectionPool`` has its own ``get_connection``: how the lane tells a pool
    of fixed size, which a lane could starve, from a plain one."""
    blocking, plain = pools
    if blocking.get_connection is plain.get_connection:
        raise changed(
            "redis",
            f"{blocking.__name__}.get_connection, now {plain.__name__}'s own",
            f"{LANE} gives no lane to a pool whose get_connection is not ConnectionPool's",
        )


def check_client_cache_is_seen(pool_class: Any) -> None:
    """A pool with a client-side cache shows it as ``cache``, which gets it no lane."""
    where = f"{LANE} gives no lane to a pool whose cache is not None"
    if getattr(pool_class(), "cache", None) is not None:
        raise changed("redis", f"{pool_class.__name__}().cache, no longer None", where)
    if not importlib.util.find_spec("redis.cache"):
        return  # a redis-py without client-side caching
    cache_config = importlib.import_module("redis.cache").CacheConfig()
    cached = pool_class(protocol=3, cache_config=cache_config)
    if getattr(cached, "cache", None) is None:
        raise changed("redis", f"{pool_class.__name__}(cache_config=...).cache, now None", where)


def check_no_asyncio_cache(client_class: Any) -> None:
    if any("cache" in p for p in inspect.signature(client_class.__init__).parameters):
        raise changed(
            "redis",
            f"{client_class.__name__}, which now takes a client-side cache",
            f"{LANE} checks only a sync pool's cache before it lanes commands",
        )


def check_client(client_class: Any) -> None:
    """``execute_command`` is a method of the class (the lane compares it with redis-py's
    own), and ``connection`` is ``None`` but for a single-connection client."""
    where = f"{LANE} lanes commands only for a client with redis-py's own execute_command"
    accepts("redis", client_class, "execute_command", where, "GET", "k")
    if not inspect.isfunction(inspect.getattr_static(client_class, "execute_command", None)):
        raise changed("redis", f"{client_class.__name__}.execute_command, a function", where)
    has_attributes("redis", client_class(), {"connection": None}, where)


def check_sync_connection(conn: Any) -> None:
    where = f"{LANE} sends and reads lane commands with these"
    accepts("redis", conn, "pack_command", where, "GET", "k")
    accepts("redis", conn, "pack_commands", where, [("GET", "k")])
    accepts("redis", conn, "send_packed_command", where, [b""])
    accepts("redis", conn, "read_response", where)
    accepts("redis", conn, "can_read", where, 0)
    accepts("redis", conn, "disconnect", where)
    accepts("redis", getattr(conn, "retry", None), "call_with_retry", where, print, print)


def check_asyncio_connection(conn: Any) -> None:
    where = f"{LANE} sends and reads lane commands with these"
    accepts("redis", conn, "pack_command", where, "GET", "k")
    accepts("redis", conn, "pack_commands", where, [("GET", "k")])
    accepts("redis", conn, "send_packed_command", where, [b""], coroutine=True)
    accepts("redis", conn, "read_response", where, coroutine=True)
    can_read = "can_read" if hasattr(conn, "can_read") else "can_read_destructive"  # redis-py < 8
    accepts("redis", conn, can_read, where, coroutine=True)
    accepts("redis", conn, "disconnect", where, nowait=True, coroutine=True)
    accepts("redis", getattr(conn, "retry", None), "call_with_retry", where, print, print)


HIREDIS_ARGS = ("EVALSHA", "0" * 40, 2, "rh:café:{对话}:msgs", "k2", b"\x00\xffbytes", 0, 12345)


def check_hiredis_packs_as_a_connection(pack: Callable[[Any], bytes]) -> None:
    """hiredis's ``pack_command`` makes the bytes a connection's own packer makes, sync and
    asyncio (utf-8, strict): what the lane sends in its place."""
    where = f"{LANE} packs lane commands with hiredis in the connection's place"
    if not redis.utils.HIREDIS_AVAILABLE:
        raise changed("redis", "redis.utils.HIREDIS_AVAILABLE, now False with hiredis", where)
    for conn in (redis.Connection(), redis.asyncio.Connection()):  # type: ignore[no-untyped-call]
        if pack(HIREDIS_ARGS) != b"".join(conn.pack_command(*HIREDIS_ARGS)):
            what = f"the bytes {type(conn).__module__}.Connection.pack_command makes"
            raise changed("redis", f"{what}, which hiredis.pack_command no longer makes", where)


def check_nodes_manager(classes: tuple[Any, Any], asyncio: bool) -> None:
    """The cluster client keeps a ``nodes_manager`` (set as it is made) whose
    ``initialize()`` reads the slot layout again."""
    cluster_class, manager_class = classes
    where = f"{LANE} reads the layout again after a slot moved (refresh_layout)"
    if "self.nodes_manager = " not in inspect.getsource(cluster_class.__init__):
        raise changed("redis", f"{cluster_class.__name__}.nodes_manager: it is gone", where)
    accepts("redis", manager_class, "initialize", where, coroutine=asyncio)


def check_async_node_pipeline(module: Any) -> None:
    """An asyncio cluster node runs ``PipelineCommand``s on one connection, setting each
    one's ``result``."""
    where = f"{LANE} sends a write and its WAIT to a slot's primary with these (anode_pipeline)"
    accepts("redis", module.ClusterNode, "execute_pipeline", where, [], coroutine=True)
    command = module.PipelineCommand(0, "GET", "k")
    if getattr(command, "args", None) != ("GET", "k") or not hasattr(command, "result"):
        raise changed("redis", "PipelineCommand(position, *args): its args and result", where)


def check_connection_kwargs(client_classes: Sequence[Any]) -> None:
    where = f"{REDACT} reads a client's password from it (client_secrets)"
    for client_class in client_classes:
        accepts("redis", client_class, "get_connection_kwargs", where)
    options = redis.Redis.from_url("redis://user:s3cret@127.0.0.1:1/0").get_connection_kwargs()
    if options.get("password") != "s3cret":
        raise changed("redis", "get_connection_kwargs(), without 'password'", where)
    if UsernamePasswordCredentialProvider("user", "s3cret").password != "s3cret":
        raise changed("redis", "UsernamePasswordCredentialProvider.password", where)


# -- pydantic -----------------------------------------------------------------------------------


def check_message_schema(schema: Any) -> None:
    """The core schema pydantic generates for ``Message`` is the dict ``_stored`` walks: a
    model under an after-validator (maybe in a definitions wrapper), its fields in a
    model-fields schema, each field's type under ``schema``, a default as a ``default``
    schema around it (holding ``default`` or ``default_factory`` as declared), the config
    beside them."""
    where = f"{STORED} derives the stored form of a message from it"

    def fail(what: str) -> Changed:
        return changed("pydantic", f"the core schema of Message: {what}", where)

    if schema.get("type") == "definitions":
        if "schema" not in schema or not isinstance(schema.get("definitions"), list):
            raise fail("a definitions schema without 'schema' and 'definitions'")
        schema = schema["schema"]
    model = schema.get("schema")
    if schema.get("type") != "function-after" or not isinstance(model, dict):
        raise fail(f"a {schema.get('type')!r} schema, not a model under an after-validator")
    if model.get("type") != "model":
        raise fail(f"the after-validator wraps a {model.get('type')!r} schema, not a model")
    fields = model.get("schema", {}).get("fields")
    if model["schema"].get("type") != "model-fields" or not isinstance(fields, dict):
        raise fail("the model's fields are no longer under a model-fields schema's 'fields'")
    if set(fields) != set(Message.model_fields):
        raise fail(f"fields {sorted(fields)}, not Message's")
    for name, info in Message.model_fields.items():
        field = fields[name]
        if not isinstance(field, dict) or not isinstance(field.get("schema"), dict):
            raise fail(f"field {name!r} without a 'schema'")
        inner = field["schema"]
        if info.is_required():
            if inner.get("type") == "default":
                raise fail(f"required field {name!r} under a default schema")
            continue
        key = "default" if info.default_factory is None else "default_factory"
        if inner.get("type") != "default" or key not in inner or "schema" not in inner:
            raise fail(f"field {name!r}: its default no longer a default schema with {key!r}")
    if model.get("config", {}).get("extra_fields_behavior") != "forbid":
        raise fail("the model's config without extra_fields_behavior")


def check_model_field(schema: Any) -> None:
    """``Entry``'s core schema reaches its model, whose ``message`` field has a ``schema``."""
    where = f"{STORED} gives Entry's message field the stored message's schema"
    while isinstance(schema, dict) and schema.get("type") != "model":
        schema = schema.get("schema")
    fields = schema.get("schema", {}).get("fields", {}) if isinstance(schema, dict) else {}
    if not isinstance(fields.get("message"), dict) or "schema" not in fields["message"]:
        raise changed("pydantic", "the core schema of Entry: its message field", where)


def check_fields_in_dict(message: Any) -> None:
    """A model keeps its fields' values, and nothing else, in its ``__dict__``, which the
    store serializes and renders without copying it."""
    where = "redis_history/models.py and redis_history/store/codec.py read a message's __dict__"
    fields = type(message).model_fields
    values = getattr(message, "__dict__", {})
    if set(values) != set(fields) or any(values[n] is not getattr(message, n) for n in fields):
        now = f"where a model keeps its fields: __dict__ holds {sorted(values)}"
        raise changed("pydantic", now, where)


# -- the checks on the installed versions, and on altered stand-ins ------------------------------


@dataclass(frozen=True)
class Fence:
    """One check, what it checks on the installed versions, and stand-ins it must fail on."""

    id: str
    dist: str
    check: Callable[[Any], None]
    real: Callable[[], Any]
    altered: tuple[Callable[[], Any], ...]


def gone() -> type:
    """A stand-in that lost every attribute checked."""
    return type("Altered", (), {})


def resigned(name: str, *, is_async: bool = False) -> Callable[[], type]:
    """A stand-in whose ``name`` takes other parameters."""

    def make() -> type:
        def method(self: Any, *, renamed: object) -> None: ...

        async def amethod(self: Any, *, renamed: object) -> None: ...

        return type("Altered", (), {name: amethod if is_async else method})

    return make


def subclass(base: type, **attributes: Any) -> type:
    """A subclass of ``base`` with ``attributes`` in place of its own."""
    return type(base.__name__, (base,), attributes)


def altered(make: Callable[[], Any], **attributes: Any) -> Callable[[], Any]:
    """A stand-in for what ``make`` makes (an instance of a dependency's class), made as
    usual, then given ``attributes`` in place of its class's own."""

    def stand_in() -> Any:
        real = make()
        real.__class__ = subclass(type(real), **attributes)
        return real

    return stand_in


def _takes_nothing(self: Any) -> None: ...


def _ignored(self: Any, value: Any) -> None:
    """A setter that keeps nothing (for a stand-in property the dependency assigns)."""


def _ignored_del(self: Any) -> None:
    """A stand-in client's finalizer: it holds no connection to close."""


def _takes_more(self: Any, *args: Any, required: object, **kwargs: Any) -> None: ...


def _not_awaitable(self: Any, *args: Any, **kwargs: Any) -> None: ...


def without(schema: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> Callable[[], Any]:
    """A deep copy of ``schema``, changed by ``change``."""

    def make() -> Any:
        altered = copy.deepcopy(schema)
        change(altered)
        return altered

    return make


def _model(schema: dict[str, Any]) -> dict[str, Any]:
    while schema.get("type") != "model":
        schema = schema["schema"]
    return schema


def _unwrap_validator(schema: dict[str, Any]) -> None:
    schema["schema"] = _model(schema)


def _rename_fields(schema: dict[str, Any]) -> None:
    fields_schema = _model(schema)["schema"]
    fields_schema["model_fields"] = fields_schema.pop("fields")


def _inline_default(schema: dict[str, Any]) -> None:
    field = _model(schema)["schema"]["fields"]["content"]
    default = field["schema"]
    field["schema"], field["default"] = default["schema"], default["default"]


def _drop_config(schema: dict[str, Any]) -> None:
    _model(schema).pop("config")


def _rename_message(schema: dict[str, Any]) -> None:
    fields = _model(schema)["schema"]["fields"]
    fields["m"] = fields.pop("message")


class _ImportsByName(Job):
    """A ``Job`` whose ``perform`` imports the function by name, not through ``func``."""

    def perform(self) -> Any:
        return pkgutil.resolve_name(self.func_name or "")(*self.args, **self.kwargs)


class _TakesOurName(SimpleWorker):
    """An RQ worker that came to define a name the compaction workers define too."""

    def _sleep(self, seconds: float) -> None: ...


class _Slotted:
    """A pool class whose instances take no new attribute."""

    __slots__ = ()


class _HasTheLane(redis.ConnectionPool):
    _redis_history_lane = None


class _KeepsFieldsElsewhere:
    """A model that keeps its values out of its ``__dict__``."""

    model_fields = Message.model_fields

    def __init__(self) -> None:
        self.__values__ = dict(Message.user("hi").__dict__)

    def __getattr__(self, name: str) -> Any:
        return self.__values__[name]


def _blocking_like_plain() -> tuple[type, type]:
    plain = type("ConnectionPool", (), {"get_connection": lambda self: None})
    return type("BlockingConnectionPool", (plain,), {}), plain


def _cache_unseen() -> type:
    class Pool(redis.ConnectionPool):
        def __init__(self, **kwargs: Any) -> None:
            kwargs.pop("cache_config", None)
            kwargs.pop("protocol", None)
            super().__init__(**kwargs)

    return Pool


def _asyncio_cached() -> type:
    class Client:
        def __init__(self, cache_config: object = None) -> None: ...

    return Client


def _other_packer() -> Callable[[Any], bytes]:
    return lambda args: b" ".join(str(a).encode() for a in args) + b"\r\n"


class _NoNodesManager:
    """A cluster client that keeps its nodes another way."""

    def __init__(self) -> None:
        self.nodes = None


def _changed_initialize(asyncio: bool) -> tuple[Callable[[], Any], ...]:
    """Stand-ins: a cluster client without a nodes manager; a manager whose ``initialize``
    takes a required argument (or, asyncio, is no coroutine function)."""
    cluster, manager = (
        (redis.asyncio.cluster.RedisCluster, redis.asyncio.cluster.NodesManager)
        if asyncio
        else (redis.cluster.RedisCluster, redis.cluster.NodesManager)
    )
    return (
        given((_NoNodesManager, manager)),
        given((cluster, subclass(manager, initialize=_takes_more))),
        *((given((cluster, subclass(manager, initialize=_not_awaitable))),) if asyncio else ()),
    )


class _ClusterNode:
    async def execute_pipeline(self, commands: list[Any], raise_on_error: bool) -> None: ...


class _PipelineCommand:
    def __init__(self, *args: Any) -> None:
        self.command = args


def _pipeline_module(**changes: Any) -> Callable[[], Any]:
    """A stand-in of ``redis.asyncio.cluster`` with ``changes``."""
    real: dict[str, Any] = {
        "ClusterNode": redis.asyncio.cluster.ClusterNode,
        "PipelineCommand": redis.asyncio.cluster.PipelineCommand,
    }
    return given(types.SimpleNamespace(**{**real, **changes}))


MESSAGE_SCHEMA: dict[str, Any] = dict(Message.__pydantic_core_schema__)
ENTRY_SCHEMA: dict[str, Any] = dict(Entry.__pydantic_core_schema__)


def guard(
    id: str,
    dist: str,
    check: Callable[[Any], None],
    real: Callable[[], Any],
    *stand_ins: Callable[[], Any],
) -> Fence:
    """A :class:`Fence` of ``check`` on what ``real`` makes, failing on each stand-in."""
    return Fence(id, dist, check, real, stand_ins)


def given(value: Any) -> Callable[[], Any]:
    """A maker of ``value`` itself (a class, a function, a schema)."""
    return lambda: value


def sync_connection() -> Any:
    """A redis-py connection, not connected."""
    return redis.Connection()  # type: ignore[no-untyped-call]


def asyncio_connection() -> Any:
    """An asyncio redis-py connection, not connected."""
    return redis.asyncio.Connection()


FENCES = [
    *(
        guard(
            f"rq-{base.__name__}.{name}",
            "rq",
            partial(check_worker_override, name=name),
            given(base),
            gone,
            resigned(name),
        )
        for base, names in WORKER_OVERRIDES.items()
        for name in names
    ),
    guard(
        "rq-BaseWorker.__init__", "rq", check_worker_init, given(BaseWorker), resigned("__init__")
    ),
    guard(
        "rq-worker-attributes",
        "rq",
        check_worker_attributes,
        plain_worker,
        types.SimpleNamespace,
        altered(plain_worker, executions=property(lambda self: [])),
        altered(plain_worker, pubsub_channel_name=property(lambda self: b"rq:pubsub")),
        altered(plain_worker, handle_payload=_takes_nothing),
        altered(plain_worker, get_state=_takes_more),
    ),
    guard("rq-max_connection_wait_time", "rq", check_connection_backoff, given(BaseWorker), gone),
    guard("rq-WorkerStatus", "rq", check_statuses, given(WorkerStatus), gone),
    *(
        guard(
            f"rq-Job.{name}",
            "rq",
            partial(check_job_property, name=name),
            given(Job),
            gone,
            resigned(name),
        )
        for name in JOB_PROPERTIES
    ),
    *(
        guard(
            f"rq-Job.{name}",
            "rq",
            partial(check_job_override, name=name),
            given(Job),
            gone,
            resigned(name),
        )
        for name in JOB_OVERRIDES
    ),
    guard(
        "rq-Job.perform-uses-func", "rq", check_perform_uses_func, given(Job), given(_ImportsByName)
    ),
    guard(
        "rq-our-names-are-free",
        "rq",
        check_our_names_are_free,
        lambda: [BaseWorker, Worker, SimpleWorker, Job, plain_worker()],
        lambda: [_TakesOurName],
        lambda: [types.SimpleNamespace(redact=None)],
    ),
    guard(
        "rq-resolve_serializer",
        "rq",
        check_serializers,
        given(resolve_serializer),
        lambda: lambda serializer: serializer,
    ),
    guard(
        "rq-setup_loghandlers",
        "rq",
        check_loghandlers,
        given(setup_loghandlers),
        lambda: lambda level, logger: None,
    ),
    *(
        guard(
            f"redis-{pool.__module__}.lane-attribute",
            "redis",
            check_lane_attribute_is_free,
            given(pool),
            lambda: _Slotted,
            lambda: _HasTheLane,
        )
        for pool in POOLS
    ),
    *(
        guard(
            f"redis-{pool.__module__}.pool",
            "redis",
            partial(check_pool_calls, asyncio=asyncio),
            given(pool),
            gone,
            resigned("get_connection", is_async=asyncio),
            given(subclass(pool, release=_takes_nothing)),
            *(
                [given(subclass(pool, maint_notifications_enabled=None))]
                if importlib.util.find_spec("redis.maint_notifications")  # redis-py 7 and later
                else []
            ),
            given(subclass(pool, max_connections=property(lambda self: None, _ignored))),
        )
        for pool, asyncio in zip(POOLS, (False, True), strict=True)
    ),
    *(
        guard(
            f"redis-{pools[0].__module__}.blocking-pool",
            "redis",
            check_blocking_pool_is_told_apart,
            given(pools),
            _blocking_like_plain,
        )
        for pools in (
            (redis.BlockingConnectionPool, redis.ConnectionPool),
            (redis.asyncio.BlockingConnectionPool, redis.asyncio.ConnectionPool),
        )
    ),
    guard(
        "redis-client-side-cache",
        "redis",
        check_client_cache_is_seen,
        given(redis.ConnectionPool),
        _cache_unseen,
    ),
    guard(
        "redis-asyncio-no-client-side-cache",
        "redis",
        check_no_asyncio_cache,
        given(redis.asyncio.Redis),
        _asyncio_cached,
    ),
    *(
        guard(
            f"redis-{client.__module__}.Redis",
            "redis",
            check_client,
            given(client),
            gone,
            resigned("execute_command"),
            given(
                subclass(
                    client,
                    connection=property(lambda self: object(), _ignored),
                    __del__=_ignored_del,
                )
            ),
        )
        for client in (redis.Redis, redis.asyncio.Redis)
    ),
    guard(
        "redis-connection",
        "redis",
        check_sync_connection,
        sync_connection,
        types.SimpleNamespace,
        altered(redis.Connection, pack_commands=_takes_nothing),
        altered(redis.Connection, send_packed_command=_takes_nothing),
        altered(redis.Connection, read_response=_takes_more),
        altered(redis.Connection, can_read=_takes_nothing),
        altered(redis.Connection, disconnect=_takes_more),
        altered(redis.Connection, retry=property(lambda self: None)),
    ),
    guard(
        "redis-asyncio-connection",
        "redis",
        check_asyncio_connection,
        asyncio_connection,
        types.SimpleNamespace,
        altered(redis.asyncio.Connection, pack_command=_takes_nothing),
        altered(redis.asyncio.Connection, send_packed_command=_not_awaitable),
        altered(redis.asyncio.Connection, read_response=_not_awaitable),
        altered(redis.asyncio.Connection, can_read=_takes_more),
        altered(redis.asyncio.Connection, disconnect=_takes_nothing),
    ),
    guard(
        "redis-hiredis-pack_command",
        "redis",
        check_hiredis_packs_as_a_connection,
        lambda: pack_command,
        _other_packer,
    ),
    *(
        guard(
            f"redis-{classes[0].__module__}.nodes_manager",
            "redis",
            partial(check_nodes_manager, asyncio=asyncio),
            given(classes),
            *_changed_initialize(asyncio),
        )
        for classes, asyncio in (
            ((redis.cluster.RedisCluster, redis.cluster.NodesManager), False),
            ((redis.asyncio.cluster.RedisCluster, redis.asyncio.cluster.NodesManager), True),
        )
    ),
    guard(
        "redis-asyncio-node-pipeline",
        "redis",
        check_async_node_pipeline,
        given(redis.asyncio.cluster),
        _pipeline_module(ClusterNode=_ClusterNode),
        _pipeline_module(PipelineCommand=_PipelineCommand),
    ),
    guard(
        "redis-get_connection_kwargs",
        "redis",
        check_connection_kwargs,
        given(
            [
                redis.Redis,
                redis.asyncio.Redis,
                redis.cluster.RedisCluster,
                redis.asyncio.cluster.RedisCluster,
            ]
        ),
        lambda: [redis.Redis, gone()],
    ),
    guard(
        "pydantic-Message-core-schema",
        "pydantic",
        check_message_schema,
        given(MESSAGE_SCHEMA),
        *(
            without(MESSAGE_SCHEMA, change)
            for change in (_unwrap_validator, _rename_fields, _inline_default, _drop_config)
        ),
    ),
    guard(
        "pydantic-Entry-core-schema",
        "pydantic",
        check_model_field,
        given(ENTRY_SCHEMA),
        without(ENTRY_SCHEMA, _rename_message),
    ),
    guard(
        "pydantic-fields-in-__dict__",
        "pydantic",
        check_fields_in_dict,
        lambda: Message.assistant("hi", name="helper"),
        _KeepsFieldsElsewhere,
    ),
]


@pytest.mark.parametrize("fence", FENCES, ids=[f.id for f in FENCES])
def test_the_installed_dependency_has_the_shape_relied_on(fence: Fence) -> None:
    """The installed redis-py, rq and pydantic have each shape the package relies on."""
    fence.check(fence.real())


STAND_INS = [
    pytest.param(fence, altered, id=f"{fence.id}-{n}")
    for fence in FENCES
    for n, altered in enumerate(fence.altered)
]


@pytest.mark.parametrize(("fence", "altered"), STAND_INS)
def test_each_check_fails_on_a_dependency_that_changed(
    fence: Fence, altered: Callable[[], Any]
) -> None:
    """Run on a stand-in altered as an upgrade could alter the dependency, a check fails
    naming the dependency, its installed version and where the package relies on it."""
    named = f"{fence.dist} {installed(fence.dist)} changed "
    with pytest.raises(Changed, match=f"^{re.escape(named)}"):
        fence.check(altered())


def test_the_names_checked_are_the_jobs_modules_own() -> None:
    """The collision check covers the attributes the workers add, their outage bookkeeping
    and redactor among them (so it checks something)."""
    assert {"_outage_since", "_sleep", "_listener_failed", "redact", "allowed_functions"} <= (
        our_names() - intended()
    )


def test_the_job_class_refuses_before_importing() -> None:
    """``CompactionOnlyJob`` refuses another function when RQ performs it."""
    job = CompactionOnlyJob.create(
        "os.getcwd", connection=fakeredis.FakeRedis(), serializer=JSONSerializer
    )
    with pytest.raises(jobs.JobRefusedError, match=r"'os\.getcwd' is not an allowed"):
        job.perform()
