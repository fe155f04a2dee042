--[[
set_ttl: give the conversation a TTL (stored with it, so every writer applies
it), or take it away. Setting the same value twice is the same as once. A
conversation that lost its meta hash or its list is refused.

KEYS[1] msgs     LIST
KEYS[2] meta     HASH (field ttl, ms)
KEYS[3] archive  LIST
KEYS[4] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] ttl      ms, or 0 to remove the TTL

Returns 1, or 0 when there is no conversation to set it on, or {5, -1, reason}.
]]
--- @include "lost"

local msgs, meta, archive, shared = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl = tonumber(ARGV[1])
local total = redis.call('HGET', meta, 'total')
local lost = keys_lost(total ~= false, tonumber(total or 0) or 0, redis.call('LLEN', msgs))
if lost then return lost end
if redis.call('EXISTS', meta) == 0 then return 0 end
if ttl > 0 then
  redis.call('HSET', meta, 'ttl', ttl)
  for _, key in ipairs({msgs, meta, archive, shared}) do redis.call('PEXPIRE', key, ttl) end
else
  redis.call('HDEL', meta, 'ttl')
  for _, key in ipairs({msgs, meta, archive, shared}) do redis.call('PERSIST', key) end
end
return 1
