--[[
append: add messages at the tail, all or none, checking role order and tool
pairing against the conversation's stored state. Applied once per op: a retry
of an applied batch (same op) writes nothing and succeeds.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (total, role, open, ttl, and the records of recent appends)
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] op       the operation token (derived from the batch's message ids)
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check role order and tool pairing, 0 to only track them
ARGV[4..] batch  tokens, n, n envelopes, n role items (see read_batch)

Returns the list's length, or {code, index, reason} having written nothing:
1 role order, 2 tool pairing, 5 corrupt meta.
]]
--- @include "meta"
--- @include "open"
--- @include "ttl"
--- @include "batch"
--- @include "walk"
--- @include "push"

local msgs, meta = KEYS[1], KEYS[2]
local op = ARGV[1]
local tokens, n, first = read_batch(4)
local total, role, open, ttl, records, exists = read_meta(meta, APPENDS)
if not total then return role end  -- read_meta's refusal
if replayed(meta, APPENDS, records, exists, op) then return redis.call('LLEN', msgs) end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))

local changed
role, open, changed = walk(role, open, ARGV, first + n, n, ARGV[3] == '1')
if not role then return open end  -- walk's refusal

-- The first write: on a key of the wrong type it fails before anything is written.
local length = push_all('RPUSH', msgs, ARGV, first, first + n - 1) or redis.call('LLEN', msgs)
if changed then
  commit(meta, APPENDS, records, op, nil, new_ttl, 'role', role, 'total', total + tokens, 'open', encode_open(open))
else
  commit(meta, APPENDS, records, op, nil, new_ttl, 'role', role, 'total', total + tokens)
end
refresh_ttl(ttl, msgs, meta, KEYS[3])
return length
