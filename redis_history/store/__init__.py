"""The store: one conversation's messages, token accounting and compaction state in Redis.

Every mutation is one Lua script (the ``lua/`` folder, loaded by
:mod:`redis_history.wire.scripts`); ``core`` builds their arguments and reads their replies
for both front ends in ``history`` (sync and asyncio), over the connection lane of
:mod:`redis_history.wire.lane`. ``codec`` and ``_stored`` are the stored
form of a message, ``keys`` the key names, ``base`` the ``History`` contract that
:class:`~redis_history.testing.InMemoryHistory` keeps too.
"""
