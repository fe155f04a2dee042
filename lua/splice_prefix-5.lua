--[[
splice_prefix: replace the oldest messages with a summary (or what a compactor
kept of them, all marked as written here), keeping everything
after them (including messages appended while the summary was computed), and
move the originals to the archive, whose oldest entries are dropped beyond its
caps. Resets the token baseline. When checking, refused if the result would part a
tool call from its result: a result among the summaries that answers none of their
calls, a kept tool result whose call was dropped (and that the summaries do not make),
a call of the summaries left unanswered before the next message, or one that was
answered and no longer is. The summaries' roles are not checked: they lead. At most MAX_READ_BYTES of the
prefix (and of the kept tool results that follow it) are read; each call drops at
most MAX_REWRITE archived entries (and MAX_READ_BYTES of them) over the caps, so a
cap lowered below a large archive is reached over several splices. An append whose
messages it compacts stays applied: appended again, its batch is a replay.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (also abytes, the archive's size, and adropped, entries capped away)
KEYS[3] archive  LIST of replaced envelopes, oldest first
KEYS[4] lock     STRING compaction lock
KEYS[5] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] drop     messages to drop (>= 0)
ARGV[4] token    the compaction lock token to fence on, or '' for none
ARGV[5] amax     the archive's cap in entries, or 0 for none
ARGV[6] abytes   the archive's cap in bytes, or 0 for none
ARGV[7] check    1 to refuse a result that parts a tool call from its result, 0 not to
ARGV[8] expect   how many ids follow (= drop), or -1 for no fence
ARGV[9..] ids    with expect: the ids (JSON-escaped) the caller summarized, oldest first
ARGV[...] blobs  k, then k triples of digest, the new messages naming it, and data: what
                 they keep outside the list (see lua/includes/blobs.lua)
ARGV[...] batch  the summaries: tokens, n, n envelopes, n role items (see read_batch)

Returns the number dropped, or {code, index, reason} having written nothing:
2 tool pairing, 3 stale prefix, 4 lock lost, 5 corrupt data, 7 over a limit.
]]
--- @include "ttl"
--- @include "rewrite"
--- @include "batch"
--- @include "walk"
--- @include "push"
--- @include "envelopes"
--- @include "ids"
--- @include "message"
--- @include "blobs"
--- @include "tally"
--- @include "parted"
--- @include "lost"
--- @include "read"
--- @include "spans_untrack"

local msgs, meta, archive, lock, shared = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, drop, token = ARGV[1], tonumber(ARGV[3]), ARGV[4]
local amax, abytes, check, expect = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
local total, role, open, ttl, records, exists = read_meta(meta, WRITES)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, WRITES, records, op)
if done then return done end
local blobs_at = 9 + math.max(expect, 0)
local pieces, over = settle(meta, nil, nil, blobs_at, false, true)
if not pieces then return over end  -- over the inline data limits
local tokens, count, first = read_batch(pieces.after)
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))
if token ~= '' and redis.call('GET', lock) ~= token then
  return {LOCK_LOST, -1, 'the compaction lock is not held by this token'}
end
local sizes = redis.call('HMGET', meta, 'abytes', 'adropped')
local stored, capped = tonumber(sizes[1] or 0), tonumber(sizes[2] or 0)
if not stored or not capped then return {CORRUPT, -1, 'meta field abytes or adropped is not a number'} end
redis.call('LLEN', archive)  -- a key of the wrong type fails here, before anything is written

local length = redis.call('LLEN', msgs)
local lost = keys_lost(exists, total, length)
if lost then return lost end
local n = math.min(drop, length)
if expect >= 0 and drop ~= n then
  return {STALE, -1, 'the conversation has ' .. length .. ' messages, fewer than the ' .. drop .. ' summarized'}
end
if n <= 0 then return 0 end

local dropped, read = read_range(msgs, 0, n - 1, MAX_READ_BYTES)
if not dropped then
  return {LIMIT, -1, 'the ' .. n .. ' messages to drop hold more than ' .. MAX_READ_BYTES .. ' bytes'}
end
if expect >= 0 then
  for i, envelope in ipairs(dropped) do
    local id = envelope_id(envelope)
    if not id then return {CORRUPT, i - 1, 'stored envelope has no message id'} end
    if id ~= ARGV[8 + i] then
      return {STALE, i - 1, 'message ' .. id .. ' is where ' .. ARGV[8 + i] .. ' was summarized'}
    end
  end
end
local gone, bad = sum_tokens(dropped)
if not gone then return {CORRUPT, bad, 'stored envelope has no token count'} end

-- The summaries' own turn state, and the kept tool results after them: each must answer
-- one of the calls the summaries leave open, and none may stay open before a message.
local made, waiting = walk('', NO_CALLS, ARGV, first + count, count, check and 'pairing')
if not made then return waiting end  -- the summaries' own pairing refused
if check then
  local left, answers = #waiting, {}
  for _, id in ipairs(waiting) do answers[id] = true end
  local i = n
  while i < length do
    local envelope = redis.call('LINDEX', msgs, i)
    read = read + #envelope
    if read > MAX_READ_BYTES then
      return {LIMIT, i, 'the prefix and the tool results after it hold more than ' .. MAX_READ_BYTES .. ' bytes'}
    end
    local m = message_of(envelope)
    if not m then return {CORRUPT, i, 'stored envelope is not a message'} end
    if m.role ~= 'tool' then
      if left > 0 then
        return {TOOL_PAIRING, i, 'the summaries leave tool calls unanswered before message ' .. i}
      end
      break
    end
    if not answers[m.tool_call_id] then
      return {TOOL_PAIRING, i, 'splicing ' .. n .. ' messages would leave the result of tool call ' .. m.tool_call_id .. ' without its call'}
    end
    answers[m.tool_call_id], left = nil, left - 1
    i = i + 1
  end
  if i == length then  -- the summaries' calls still open end the conversation
    local still = {}
    for _, id in ipairs(waiting) do
      if answers[id] then still[#still + 1] = id end
    end
    local parted = lost_result(still, open)
    if parted then
      return {TOOL_PAIRING, -1, 'splicing ' .. n .. ' messages would part tool call ' .. parted .. ' from its result'}
    end
  end
end

local archived = push_all('RPUSH', archive, dropped, 1, #dropped)
for _, envelope in ipairs(dropped) do stored = stored + #envelope end
-- The pieces the prefix names move from the list's counts to the archive's; those of the
-- entries capped away are counted down.
local live, moved = {}, {}
tally(live, dropped, -1)
tally(moved, dropped, 1)
local popped, freed = 0, 0
while archived > 0 and ((amax > 0 and archived > amax) or (abytes > 0 and stored > abytes))
    and popped < MAX_REWRITE and freed <= MAX_READ_BYTES do
  local k = amax > 0 and archived > amax and archived - amax or 1
  k = math.min(k, MAX_REWRITE - popped, math.max(1, math.floor((MAX_READ_BYTES - freed) / MAX_ENTRY_BYTES)))
  local out = redis.call('LPOP', archive, k)
  for _, envelope in ipairs(out) do
    stored, freed = stored - #envelope, freed + #envelope
  end
  tally(moved, out, -1)
  archived, capped, popped = archived - k, capped + k, popped + k
end
redis.call('HSET', meta, 'abytes', stored, 'adropped', capped)

local appends = untrack_spans(meta, length, n)  -- an append compacted away stays applied
redis.call('LTRIM', msgs, n, -1)
local reversed = {}
for i = first + count - 1, first, -1 do reversed[#reversed + 1] = ARGV[i] end
push_all('LPUSH', msgs, reversed, 1, #reversed)
write_pieces(meta, settle(meta, live, moved, blobs_at, false, false))

-- What is left after the prefix keeps the turn state; only when nothing is do the new messages
-- (summaries, or the turns a compactor kept, tool calls and all) set it.
if n == length then role, open = made, waiting end
rewritten(meta, records, op, n, total - gone + tokens, role, open, new_ttl, appends)
refresh_ttl(ttl, msgs, meta, archive, shared)
return n
