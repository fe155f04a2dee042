--[[
record_tokens: make the real input-token count the LLM reported the baseline;
the tokens appended after it are counted from the current total (the mark).

KEYS[1] msgs     LIST (only its TTL is refreshed)
KEYS[2] meta     HASH (baseline, mark, total)
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] tokens   the reported input tokens (>= 0)
ARGV[2] ttl      ms, or 0

Returns 0, or {5, -1, reason} having written nothing.
]]
--- @include "codes"
--- @include "ttl"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local total = tonumber(redis.call('HGET', meta, 'total') or 0)
if not total then return {CORRUPT, -1, 'meta field total is not a number'} end
redis.call('HSET', meta, 'baseline', ARGV[1], 'mark', total)
refresh_ttl(tonumber(ARGV[2]), msgs, meta, archive)
return 0
