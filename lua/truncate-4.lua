--[[
truncate: keep at most n messages (roll back a failed turn, single writer: the
position is the caller's). The role and tool-pairing state is rebuilt from the
new tail; the token baseline is reset. A no-op, baseline included, when n >= length.
Refused when checking and the cut would part a tool call from its result (the first
message removed is a tool result), or when it would remove more than MAX_REWRITE
messages or MAX_READ_BYTES of them (truncating to 0 reads none). The pieces of inline data
no entry names any more are deleted (lua/includes/blobs.lua). A recent append whose messages
it removes, all of them, may be appended again; one it cuts is refused if appended again
(spans_cut.lua).

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
KEYS[4] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] n        messages to keep (>= 0)
ARGV[4] check    1 to refuse a cut between a tool call and its result, 0 not to

Returns the number removed, or {code, index, reason} having written nothing:
2 tool pairing, 5 corrupt data, 7 over a limit.
]]
--- @include "ttl"
--- @include "rewrite"
--- @include "envelopes"
--- @include "turns"
--- @include "lost"
--- @include "read"
--- @include "blobs"
--- @include "tally"
--- @include "spans_cut"

local msgs, meta, archive, shared = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, keep, check = ARGV[1], tonumber(ARGV[3]), ARGV[4] == '1'
local total, role, open, ttl, records, exists = read_meta(meta, WRITES)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, WRITES, records, op)
if done then return done end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))
local length = redis.call('LLEN', msgs)
local lost = keys_lost(exists, total, length)
if lost then return lost end
if keep >= length then return 0 end

local gone, live = total, {}
if keep > 0 then
  if length - keep > MAX_REWRITE then
    return {LIMIT, keep, 'truncating to ' .. keep .. ' would remove ' .. (length - keep) .. ' messages; the limit is ' .. MAX_REWRITE}
  end
  local removed, bytes = read_range(msgs, keep, length - 1, MAX_READ_BYTES)
  if not removed then
    return {LIMIT, keep, 'truncating to ' .. keep .. ' would remove more than ' .. MAX_READ_BYTES .. ' bytes of messages'}
  end
  local bad
  gone, bad = sum_tokens(removed)
  if not gone then return {CORRUPT, keep + bad, 'stored envelope has no token count'} end
  tally(live, removed, -1)
  if check then
    local first = message_of(removed[1])
    if not first then return {CORRUPT, keep, 'stored envelope is not a message'} end
    if first.role == 'tool' then
      return {TOOL_PAIRING, keep, 'truncating to ' .. keep .. ' would part tool call ' .. first.tool_call_id .. ' from its result'}
    end
  end
end
role, open = state_before(msgs, keep)
if not role then return open end  -- a corrupt envelope

-- The pieces the removed messages name are counted down (all of the list's, truncating to 0).
local pieces = settle(meta, live, nil, nil, keep == 0, false)
local appends = cut_spans(meta, length, keep, function(start, stop) return stop - math.max(start, keep) end)
if keep == 0 then redis.call('UNLINK', msgs) else redis.call('LTRIM', msgs, 0, keep - 1) end
write_pieces(meta, pieces)
rewritten(meta, records, op, length - keep, total - gone, role, open, new_ttl, appends)
refresh_ttl(ttl, msgs, meta, archive, shared)
return length - keep
