--[[
append: add messages at the tail, all or none, checking role order and tool
pairing against the conversation's stored state.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (total, role, open)
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] check    1 to check role order and tool pairing, 0 to only track them
ARGV[2..] batch  ttl, tokens, n, n envelopes, n role items (see read_batch)

Returns the list's length, or {code, index, reason} having written nothing:
1 role order, 2 tool pairing, 5 corrupt meta.
]]
--- @include "codes"
--- @include "meta"
--- @include "ttl"
--- @include "batch"

local msgs, meta = KEYS[1], KEYS[2]
local ttl, tokens, n, first = read_batch(2)
local total, role, open = load_meta(meta)
if not total then return {CORRUPT, -1, role} end

local changed
role, open, changed = walk(role, open, first + n, n, ARGV[1] == '1')
if not role then return open end  -- walk's refusal

-- The first write: on a key of the wrong type it fails before anything is written.
local length = push_all('RPUSH', msgs, ARGV, first, first + n - 1) or redis.call('LLEN', msgs)
if changed then
  redis.call('HSET', meta, 'role', role, 'total', total + tokens, 'open', encode_open(open))
else
  redis.call('HSET', meta, 'role', role, 'total', total + tokens)
end
refresh_ttl(ttl, msgs, meta, KEYS[3])
return length
