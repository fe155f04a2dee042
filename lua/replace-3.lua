--[[
replace: swap the whole list for new messages, all or none, checking the new
list's role order and tool pairing from an empty start; resets the token baseline.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] check    1 to check role order and tool pairing, 0 to only track them
ARGV[2..] batch  ttl, tokens, n, n envelopes, n role items (see read_batch)

Returns the new length, or {code, index, reason} having written nothing.
]]
--- @include "codes"
--- @include "meta"
--- @include "ttl"
--- @include "rewrite"
--- @include "batch"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local ttl, tokens, n, first = read_batch(2)
local total, why = load_meta(meta)
if not total then return {CORRUPT, -1, why} end
redis.call('LLEN', msgs)

local role, open = walk('', NO_CALLS, first + n, n, ARGV[1] == '1')
if not role then return open end  -- walk's refusal

redis.call('DEL', msgs)
push_all('RPUSH', msgs, ARGV, first, first + n - 1)
rewritten(meta, tokens, role, open)
refresh_ttl(ttl, msgs, meta, archive)
return n
