--[[
append: add messages at the tail, all or none, checking role order and tool
pairing against the conversation's stored state.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (version, total, approx, since, role, open)
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] check    1 to check role order and tool pairing, 0 to only track them
ARGV[2..] batch  exact, ttl, tokens, n, n envelopes, role items (see read_batch)

Returns {0, length, version}, or {code, index, reason} having written nothing:
1 role order, 2 tool pairing, 5 corrupt meta.
]]
--- @include "history"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local check = ARGV[1] == '1'
local batch = read_batch(2)
local state, why = load_meta(meta)
if not state then return {CORRUPT, -1, why} end

local err = advance_all(state, batch, check)
if err then return err end

-- The first write: on a key of the wrong type it fails before anything is written.
local length = push_all('RPUSH', msgs, ARGV, batch.first, batch.last)
local version, tokens = state.version + 1, batch.tokens
if batch.exact then
  redis.call('HSET', meta, 'role', state.role, 'open', encode_open(state.open),
    'total', state.total + tokens, 'since', state.since + tokens, 'version', version)
else
  redis.call('HSET', meta, 'role', state.role, 'open', encode_open(state.open),
    'total', state.total + tokens, 'since', state.since + tokens, 'version', version,
    'approx', state.approx + tokens)
end
refresh_ttl(batch.ttl, msgs, meta, archive)
return {OK, length or redis.call('LLEN', msgs), version}
