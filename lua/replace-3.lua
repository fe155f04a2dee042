--[[
replace: swap the whole list for new messages, all or none, checking the new
list's role order and tool pairing from an empty start; resets the token baseline.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] check    1 to check role order and tool pairing, 0 to only track them
ARGV[2..] batch  exact, ttl, tokens, n, n envelopes, role items (see read_batch)

Returns {0, length, version}, or {code, index, reason} having written nothing.
]]
--- @include "history"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local check = ARGV[1] == '1'
local batch = read_batch(2)
local old, why = load_meta(meta)
if not old then return {CORRUPT, -1, why} end
redis.call('LLEN', msgs)

local state = {role = '', open = {}}
local err = advance_all(state, batch, check)
if err then return err end

redis.call('DEL', msgs)
push_all('RPUSH', msgs, ARGV, batch.first, batch.last)
redis.call('HSET', meta, 'role', state.role, 'open', encode_open(state.open),
  'total', batch.tokens, 'approx', batch.exact and 0 or batch.tokens, 'since', 0,
  'version', old.version + 1)
redis.call('HDEL', meta, 'baseline')
refresh_ttl(batch.ttl, msgs, meta, archive)
return {OK, batch.last - batch.first + 1, old.version + 1}
