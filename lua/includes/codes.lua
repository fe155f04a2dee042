-- Script result codes: a script returns its result on success, or
-- {code, index, reason} having written nothing (redis_history/store/scripts.py maps the codes).
local ROLE_ORDER, TOOL_PAIRING, STALE, LOCK_LOST, CORRUPT, INVALID_TRANSITION, LIMIT, MISMATCH, UNINDEXED = 1, 2, 3, 4, 5, 6, 7, 8, 9
