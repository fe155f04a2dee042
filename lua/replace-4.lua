--[[
replace: swap the whole list for new messages, all or none, checking the new
list's role order and tool pairing from an empty start; resets the token
baseline. Fenced when the caller names the ids it expects the list to hold (at most
MAX_READ_BYTES of the list are compared). A message that is a summary at the head of
the list now stays marked as one where the new list holds it (by id). Every append made
before stays applied: appended again, its batch is a replay. Repairs a conversation whose
meta hash was lost.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
KEYS[4] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check role order (the strict rules) and tool pairing, l the same by the
                 lenient rules (walk.lua), 0 to only track them
ARGV[4] expect   how many expected ids follow, or -1 for no fence
ARGV[5..] ids    the ids (JSON-escaped) the list must hold, in order
ARGV[...] blobs  k, then k triples of digest, the messages naming it, and data (see
                 lua/includes/blobs.lua)
ARGV[...] batch  tokens, n, n envelopes, n role items (see read_batch)

Returns the new length, or {code, index, reason} having written nothing:
1 role order, 2 tool pairing, 3 stale (the list is not the expected one), 5 corrupt data,
7 over a limit.
]]
--- @include "ttl"
--- @include "rewrite"
--- @include "batch"
--- @include "walk"
--- @include "push"
--- @include "ids"
--- @include "read"
--- @include "blobs"
--- @include "spans_untrack"

local msgs, meta, archive, shared = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, expect = ARGV[1], tonumber(ARGV[4])
local total, role, open, ttl, records, exists = read_meta(meta, WRITES)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, WRITES, records, op)
if done then return done end
-- The list's pieces are counted down and the new ones up; what no entry names goes.
local blobs_at = 5 + math.max(expect, 0)
local pieces, over = settle(meta, nil, nil, blobs_at, true, true)
if not pieces then return over end  -- over the inline data limits
local tokens, n, first = read_batch(pieces.after)
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))

-- A key of the wrong type fails here, before anything is written.
local length = redis.call('LLEN', msgs)
if expect >= 0 then
  if length ~= expect then
    return {STALE, -1, 'the conversation has ' .. length .. ' messages, not the ' .. expect .. ' expected'}
  end
  local current = read_range(msgs, 0, length - 1, MAX_READ_BYTES)
  if not current then
    return {LIMIT, -1, 'the conversation holds more than ' .. MAX_READ_BYTES .. ' bytes to compare'}
  end
  for i, envelope in ipairs(current) do
    local id = envelope_id(envelope)
    if not id then return {CORRUPT, i - 1, 'stored envelope has no message id'} end
    if id ~= ARGV[4 + i] then
      return {STALE, i - 1, 'message ' .. id .. ' is where ' .. ARGV[4 + i] .. ' was expected'}
    end
  end
end

role, open = walk('', NO_CALLS, ARGV, first + n, n, ARGV[3] == 'l' and 'lenient' or ARGV[3] == '1')
if not role then return open end  -- walk's refusal

-- The summaries a splice left at the head stay summaries where the new list keeps them,
-- so the transcript goes on showing the originals they replaced, not them. Read a few at
-- a time, at most MAX_REWRITE of them and MAX_READ_BYTES.
local summaries, read, kept, i, k = {}, 0, false, 0, 1
while i < length do
  local chunk = redis.call('LRANGE', msgs, i, i + k - 1)
  for c, envelope in ipairs(chunk) do
    read = read + #envelope
    local flags = string.match(envelope, '^{"t":%d+,([%w":,]-)"m":{')
    local summary = flags and string.find(flags, '"s":1', 1, true)
    if read > MAX_READ_BYTES or (summary and i + c > MAX_REWRITE) then
      return {LIMIT, i + c - 1, 'the summaries at the head of the conversation are more than ' .. MAX_REWRITE .. ' messages or ' .. MAX_READ_BYTES .. ' bytes'}
    end
    if not summary then
      i = length
      break
    end
    local id = envelope_id(envelope)
    if id then summaries[id], kept = true, true end
  end
  i = i + #chunk
  k = math.min(2 * k, math.max(1, math.floor((MAX_READ_BYTES - read) / MAX_ENTRY_BYTES)))
end
local values, from = ARGV, first
if kept then
  values, from = {}, 1
  for i = first, first + n - 1 do
    local envelope = ARGV[i]
    local flags = string.match(envelope, '^{"t":%d+,([%w":,]-)"m":{')
    if summaries[envelope_id(envelope)] and flags and not string.find(flags, '"s":1', 1, true) then
      local comma = string.find(envelope, ',', 1, true)
      envelope = string.sub(envelope, 1, comma) .. '"s":1,' .. string.sub(envelope, comma + 1)
    end
    values[#values + 1] = envelope
  end
end

local appends = untrack_spans(meta, length, math.huge)  -- every append made before stays applied
redis.call('UNLINK', msgs)
push_all('RPUSH', msgs, values, from, from + n - 1)
write_pieces(meta, pieces)
rewritten(meta, records, op, n, tokens, role, open, new_ttl, appends)
refresh_ttl(ttl, msgs, meta, archive, shared)
return n
