--[[
replace: swap the whole list for new messages, all or none, checking the new
list's role order and tool pairing from an empty start; resets the token
baseline. Fenced when the caller names the ids it expects the list to hold.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] op       the operation token
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check role order and tool pairing, 0 to only track them
ARGV[4] expect   how many expected ids follow, or -1 for no fence
ARGV[5..] ids    the ids (JSON-escaped) the list must hold, in order
ARGV[...] batch  tokens, n, n envelopes, n role items (see read_batch)

Returns the new length, or {code, index, reason} having written nothing:
1 role order, 2 tool pairing, 3 stale (the list is not the expected one), 5 corrupt data.
]]
--- @include "ttl"
--- @include "rewrite"
--- @include "batch"
--- @include "walk"
--- @include "push"
--- @include "ids"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local op, expect = ARGV[1], tonumber(ARGV[4])
local tokens, n, first = read_batch(5 + math.max(expect, 0))
local total, role, open, ttl, records, exists = read_meta(meta, WRITES)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, WRITES, records, exists, op)
if done then return done end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))

if expect >= 0 then
  local current = redis.call('LRANGE', msgs, 0, -1)
  if #current ~= expect then
    return {STALE, -1, 'the conversation has ' .. #current .. ' messages, not the ' .. expect .. ' expected'}
  end
  for i, envelope in ipairs(current) do
    local id = envelope_id(envelope)
    if not id then return {CORRUPT, i - 1, 'stored envelope has no message id'} end
    if id ~= ARGV[4 + i] then
      return {STALE, i - 1, 'message ' .. id .. ' is where ' .. ARGV[4 + i] .. ' was expected'}
    end
  end
else
  redis.call('LLEN', msgs)  -- a key of the wrong type fails here, before anything is written
end

role, open = walk('', NO_CALLS, ARGV, first + n, n, ARGV[3] == '1')
if not role then return open end  -- walk's refusal

redis.call('DEL', msgs)
push_all('RPUSH', msgs, ARGV, first, first + n - 1)
rewritten(meta, records, op, n, tokens, role, open, new_ttl)
refresh_ttl(ttl, msgs, meta, archive)
return n
