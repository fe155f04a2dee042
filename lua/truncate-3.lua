--[[
truncate: keep at most n messages (roll back a failed turn, single writer: the
position is the caller's). The role and tool-pairing state is rebuilt from the
new tail; the token baseline is reset. A no-op, baseline included, when n >= length.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] op       the operation token
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] n        messages to keep (>= 0)

Returns the number removed, or {5, index, reason} having written nothing.
]]
--- @include "ttl"
--- @include "rewrite"
--- @include "envelopes"
--- @include "turns"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local op, keep = ARGV[1], tonumber(ARGV[3])
local total, role, open, ttl, records, exists = read_meta(meta, WRITES)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, WRITES, records, exists, op)
if done then return done end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))
local length = redis.call('LLEN', msgs)
if keep >= length then return 0 end

local removed = redis.call('LRANGE', msgs, keep, -1)
local gone, bad = sum_tokens(removed)
if not gone then return {CORRUPT, keep + bad, 'stored envelope has no token count'} end
role, open = state_before(msgs, keep)
if not role then return open end  -- a corrupt envelope

if keep == 0 then redis.call('DEL', msgs) else redis.call('LTRIM', msgs, 0, keep - 1) end
rewritten(meta, records, op, length - keep, total - gone, role, open, new_ttl)
refresh_ttl(ttl, msgs, meta, archive)
return length - keep
