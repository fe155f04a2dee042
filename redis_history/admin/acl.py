"""A tenant's Redis ACL rule: ``redis-history acl``.

The rule confines a user to one namespace's keys (``~rh:<namespace>:*``: its conversations
and memories) and to the commands the store and the workers run there: reads and writes of
lists, hashes, strings and sets, transactions (a staged append), expiry, and the store's
scripts by ``EVAL``/``EVALSHA`` with ``SCRIPT LOAD`` and ``SCRIPT EXISTS`` (redis-py's lock
loads its scripts so). Nothing else of scripting (no ``SCRIPT FLUSH``, no Redis 7
functions), nothing ``@dangerous`` (``KEYS``, ``FLUSHALL``, ``CONFIG``, ``DEBUG``, ...), no
``SCAN`` or ``RANDOMKEY`` (which would list other tenants' key names), no channels. The same
rule works on Redis 6.2 and 7.

The password is given as its SHA-256 (``#<hex>``), so the printed rule can be kept in an
ACL file or a deployment's configuration without the password in clear.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from redis_history.store.keys import DEFAULT_PREFIX, namespace_pattern

__all__ = ["TENANT_COMMANDS", "setuser_command", "tenant_rule"]

TENANT_COMMANDS = (
    "-@all",
    "+@connection",
    "+@read",
    "+@write",
    "+@transaction",
    "-@scripting",
    "+eval",
    "+evalsha",
    "+script|load",
    "+script|exists",
    "-@dangerous",
    "-scan",
    "-randomkey",
)
"""The command rules, in order: each applies on top of those before it."""

_USER = re.compile(r"^[^\s\x00-\x1f\x7f]+$")


def tenant_rule(
    namespace: str, *, user: str, password: str, prefix: str = DEFAULT_PREFIX
) -> list[str]:
    """The arguments of ``ACL SETUSER`` that make ``user`` a tenant of ``namespace``.

    ``reset`` first, so that applying the rule to an existing user replaces what it had.

    Raises:
        ValueError: a namespace or prefix that would widen the key pattern (``*``, ``?``,
            ``[``, ``]``, ``\\``) or is not a usable name; an empty password; a user name
            with spaces or control characters.
    """
    pattern = namespace_pattern(namespace, prefix)
    if not _USER.match(user):
        raise ValueError(f"an ACL user name has no spaces or control characters: {user!r}")
    if not password:
        raise ValueError("the tenant's password is empty")
    digest = hashlib.sha256(password.encode("utf-8", "surrogatepass")).hexdigest()
    return [user, "reset", "on", f"#{digest}", f"~{pattern}", "resetchannels", *TENANT_COMMANDS]


def setuser_command(rule: list[str]) -> str:
    """``ACL SETUSER`` with ``rule``, one line as ``redis-cli`` takes it."""
    return " ".join(["ACL", "SETUSER", *map(shlex.quote, rule)])
