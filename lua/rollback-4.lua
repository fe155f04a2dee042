--[[
rollback: remove exactly the named messages (a failed turn) wherever they now
are, keeping everything else in order. Refused, writing nothing, when one of
them is no longer in the conversation (compacted away, never stored), when it is
not among the last MAX_ROLLBACK messages (or within MAX_READ_BYTES of the tail), or,
when checking, when what remains would break role order (by the strict or the lenient
rules, walk.lua) or tool pairing: a result left
without its call, a call unanswered before the next message, or (unless the caller
reopens calls) an answered call left at the tail without its result. Resets the token
baseline. The pieces of inline data no entry names any more are deleted
(lua/includes/blobs.lua). A recent append whose messages it removes, all of them, may be
appended again; one it removes part of is refused if appended again (spans_cut.lua).

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
KEYS[4] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token (fresh per call, or from the caller's op_id)
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check what remains by the strict rules, l by the lenient ones; 2 and L
                 the same but letting calls at the tail reopen; 0 not to check
ARGV[4] count    how many distinct ids follow (> 0)
ARGV[5..] ids    the message ids to remove, JSON-escaped

Returns the number removed, or {code, index, reason} having written nothing:
3 stale (a message is gone, or the rest would break the rules), 5 corrupt data,
7 not within the reach of a rollback.
]]
--- @include "ttl"
--- @include "rewrite"
--- @include "walk"
--- @include "push"
--- @include "ids"
--- @include "turns"
--- @include "parted"
--- @include "lost"
--- @include "read"
--- @include "blobs"
--- @include "tally"
--- @include "spans_cut"

local msgs, meta, archive, shared = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, mode, count = ARGV[1], ARGV[3], tonumber(ARGV[4])
local check = (mode == 'l' or mode == 'L') and 'lenient' or mode ~= '0'
local keep_answers = mode == '1' or mode == 'l'  -- an answered call may not reopen
local total, role, open, ttl, records, exists = read_meta(meta, WRITES)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, WRITES, records, op)
if done then return done end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))
local length = redis.call('LLEN', msgs)
local lost = keys_lost(exists, total, length)
if lost then return lost end
local was_open = open

local wanted = {}
for i = 5, 4 + count do wanted[ARGV[i]] = true end

-- Read back from the tail, where a failed turn is, until every id is found, within reach.
local at, seen, found, from, start, bytes = {}, {}, 0, length, length, 0
local reach = math.max(0, length - MAX_ROLLBACK)
while found < count and start > reach do
  local stop = start
  start = math.max(reach, stop - 2 * count - 8)
  local chunk, size = read_range(msgs, start, stop - 1, MAX_READ_BYTES - bytes)
  if not chunk then
    return {LIMIT, -1, 'the messages to roll back are not within the last ' .. MAX_READ_BYTES .. ' bytes of the conversation'}
  end
  bytes = bytes + size
  for i = #chunk, 1, -1 do
    local id = envelope_id(chunk[i])
    if not id then return {CORRUPT, start + i - 1, 'stored envelope has no message id'} end
    at[start + i - 1] = chunk[i]
    if wanted[id] then
      from = start + i - 1
      if not seen[id] then seen[id], found = true, found + 1 end
    end
  end
end
if found < count then
  for i = 5, 4 + count do
    if not seen[ARGV[i]] then
      if start > 0 then
        return {LIMIT, -1, 'message ' .. ARGV[i] .. ' is not among the last ' .. MAX_ROLLBACK .. ' messages, which a rollback reaches'}
      end
      return {STALE, -1, 'message ' .. ARGV[i] .. ' is no longer in the conversation'}
    end
  end
end

-- From the first removed message on: what goes, and what stays and must still follow the rules.
role, open = state_before(msgs, from)
if not role then return open end  -- a corrupt envelope
local kept, items, gone, removed, at_removed = {}, {}, 0, {}, {}
for i = from, length - 1 do
  local envelope = at[i]
  local t = tonumber(string.match(envelope, '^{"t":(%d+),'))
  if not t then return {CORRUPT, i, 'stored envelope has no token count'} end
  if wanted[envelope_id(envelope)] then
    gone, at_removed[#at_removed + 1] = gone + t, i
    removed[#removed + 1] = envelope
  else
    local message = message_of(envelope)
    if not message then return {CORRUPT, i, 'stored envelope is not a message'} end
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
local why
role, why = walk(role, open, items, 1, #kept, check)
if not role then
  return {STALE, -1, 'removing these messages would leave the rest out of order: ' .. why[3]}
end
open = why
local parted = keep_answers and lost_result(open, was_open)
if parted then
  return {STALE, -1, 'removing these messages would part tool call ' .. parted .. ' from its result'}
end

local live = {}
tally(live, removed, -1)
local pieces = settle(meta, live, nil, nil, false, false)
-- The appends it removed all of are new again; those it removed part of, cut.
local last = #at_removed
local appends = cut_spans(meta, length, from, function(start)
  local k = 0
  while last > 0 and at_removed[last] >= start do k, last = k + 1, last - 1 end
  return k
end)
if from == 0 then redis.call('UNLINK', msgs) else redis.call('LTRIM', msgs, 0, from - 1) end
push_all('RPUSH', msgs, kept, 1, #kept)
write_pieces(meta, pieces)
rewritten(meta, records, op, count, total - gone, role, open, new_ttl, appends)
refresh_ttl(ttl, msgs, meta, archive, shared)
return count
