--[[
rollback: remove exactly the named messages (a failed turn) wherever they now
are, keeping everything else in order. Refused, writing nothing, when one of
them is no longer in the conversation (compacted away, never stored) or when
what remains would break role order or tool pairing. Resets the token baseline.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] op       the operation token (fresh per call, or from the caller's op_id)
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check what remains, 0 not to
ARGV[4] count    how many distinct ids follow (> 0)
ARGV[5..] ids    the message ids to remove, JSON-escaped

Returns the number removed, or {code, index, reason} having written nothing:
3 stale (a message is gone, or the rest would break the rules), 5 corrupt data.
]]
--- @include "ttl"
--- @include "rewrite"
--- @include "walk"
--- @include "push"
--- @include "ids"
--- @include "turns"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local op, check, count = ARGV[1], ARGV[3] == '1', tonumber(ARGV[4])
local total, role, open, ttl, records, exists = read_meta(meta, WRITES)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, WRITES, records, exists, op)
if done then return done end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))

local wanted = {}
for i = 5, 4 + count do wanted[ARGV[i]] = true end

-- Read back from the tail, where a failed turn is, until every id is found.
local length = redis.call('LLEN', msgs)
local seen, found, from, stop = {}, 0, length, length
while found < count and stop > 0 do
  local start = math.max(0, stop - 2 * count - 8)
  local chunk = redis.call('LRANGE', msgs, start, stop - 1)
  for i = #chunk, 1, -1 do
    local id = envelope_id(chunk[i])
    if not id then return {CORRUPT, start + i - 1, 'stored envelope has no message id'} end
    if wanted[id] then
      from = start + i - 1
      if not seen[id] then seen[id], found = true, found + 1 end
    end
  end
  stop = start
end
if found < count then
  for i = 5, 4 + count do
    if not seen[ARGV[i]] then
      return {STALE, -1, 'message ' .. ARGV[i] .. ' is no longer in the conversation'}
    end
  end
end

-- From the first removed message on: what goes, and what stays and must still follow the rules.
role, open = state_before(msgs, from)
if not role then return open end  -- a corrupt envelope
local kept, items, gone = {}, {}, 0
for i, envelope in ipairs(redis.call('LRANGE', msgs, from, -1)) do
  local t = tonumber(string.match(envelope, '^{"t":(%d+),'))
  if not t then return {CORRUPT, from + i - 1, 'stored envelope has no token count'} end
  if wanted[envelope_id(envelope)] then
    gone = gone + t
  else
    local message = message_of(envelope)
    if not message then return {CORRUPT, from + i - 1, 'stored envelope is not a message'} end
    kept[#kept + 1] = envelope
    items[#items + 1] = message.role
    if message.role == 'tool' then
      items[#items + 1] = message.tool_call_id
    elseif message.role == 'assistant' then
      items[#items + 1] = #message.tool_calls
      for _, call in ipairs(message.tool_calls) do items[#items + 1] = call.id end
    end
  end
end
if #kept > 0 then
  local why
  role, why = walk(role, open, items, 1, #kept, check)
  if not role then
    return {STALE, -1, 'removing these messages would leave the rest out of order: ' .. why[3]}
  end
  open = why
end

if from == 0 then redis.call('DEL', msgs) else redis.call('LTRIM', msgs, 0, from - 1) end
push_all('RPUSH', msgs, kept, 1, #kept)
rewritten(meta, records, op, count, total - gone, role, open, new_ttl)
refresh_ttl(ttl, msgs, meta, archive)
return count
