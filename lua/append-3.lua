--[[
append: add messages at the tail, all or none, checking role order and tool
pairing against the conversation's stored state.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (version, total, approx, since, role, open)
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] header   JSON {"v": 1 to check | 0, "x": 1 if counts are exact | 0, "ttl": ms or 0,
                       "m": [{"r": role, "t": tokens, "c": [tool call ids], "a": answered id}]}
ARGV[2..] envelopes, one per header item

Returns {0, length, version}, or {code, index, reason} having written nothing:
1 role order, 2 tool pairing, 5 corrupt meta.
]]
--- @include "history"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local header = cjson.decode(ARGV[1])
local state, why = load_meta(meta)
if not state then return {CORRUPT, -1, why} end

local err = advance_all(state, header.m, header.v == 1)
if err then return err end

local tokens = header_sums(header.m)
-- The first write: on a key of the wrong type it fails before anything is written.
local length = push_all('RPUSH', msgs, ARGV, 2, #ARGV)
local fields = {'role', state.role, 'open', encode_open(state.open),
  'total', state.total + tokens, 'since', state.since + tokens, 'version', state.version + 1}
if header.x ~= 1 then
  fields[#fields + 1] = 'approx'
  fields[#fields + 1] = state.approx + tokens
end
redis.call('HSET', meta, unpack(fields))
refresh_ttl(header.ttl, msgs, meta, archive)
return {OK, length or redis.call('LLEN', msgs), state.version + 1}
