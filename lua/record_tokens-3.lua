--[[
record_tokens: make the real input-token count the LLM reported the baseline;
the tokens appended after it are counted from zero.

KEYS[1] msgs     LIST (only its TTL is refreshed)
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] tokens   the reported input tokens (>= 0)
ARGV[2] ttl      ms, or 0

Returns {0, 0, version}.
]]
--- @include "history"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local state, why = load_meta(meta)
if not state then return {CORRUPT, -1, why} end
redis.call('HSET', meta, 'baseline', ARGV[1], 'since', 0)
refresh_ttl(tonumber(ARGV[2]), msgs, meta, archive)
return {OK, 0, state.version}
