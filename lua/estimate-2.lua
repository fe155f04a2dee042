--[[
estimate: the meta fields the O(1) reads give (token_estimate, compaction_status), read
with the list's length, so that a conversation whose meta hash or list was lost (evicted,
deleted) is reported instead of read as empty or as its stale counts.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (total, baseline, mark, cstate, xlen, xwhy)

Returns {total, baseline, mark, cstate, xlen, xwhy, length}, each but the list's length nil
when absent; or {5, -1, reason}.
]]
--- @include "lost"

local f = redis.call('HMGET', KEYS[2], 'total', 'baseline', 'mark', 'cstate', 'xlen', 'xwhy')
local length = redis.call('LLEN', KEYS[1])
local lost = keys_lost(f[1] ~= false, tonumber(f[1] or 0) or 0, length)
if lost then return lost end
f[7] = length
return f
