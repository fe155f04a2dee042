--[[
replace: swap the whole list for new messages, all or none, checking the new
list's role order and tool pairing from an empty start; resets the token baseline.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] header   JSON as for append: {"v", "x", "ttl", "m": [...]}
ARGV[2..] envelopes

Returns {0, length, version}, or {code, index, reason} having written nothing.
]]
--- @include "history"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local header = cjson.decode(ARGV[1])
local old, why = load_meta(meta)
if not old then return {CORRUPT, -1, why} end
redis.call('LLEN', msgs)

local state = {role = '', open = {}}
local err = advance_all(state, header.m, header.v == 1)
if err then return err end

local tokens = header_sums(header.m)
redis.call('DEL', msgs)
push_all('RPUSH', msgs, ARGV, 2, #ARGV)
redis.call('HSET', meta, 'role', state.role, 'open', encode_open(state.open), 'total', tokens,
  'approx', header.x == 1 and 0 or tokens, 'since', 0, 'version', old.version + 1)
redis.call('HDEL', meta, 'baseline')
refresh_ttl(header.ttl, msgs, meta, archive)
return {OK, #ARGV - 1, old.version + 1}
