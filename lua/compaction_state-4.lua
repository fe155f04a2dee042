--[[
compaction_state: apply one event to the conversation's compaction state, the
same transition map as redis_history/compaction/state.py (a test checks they agree).
Nothing is written when the state does not change, or when the conversation
does not exist (a late event after delete() must not bring it back). A conversation
that lost its meta hash or its list is refused.

KEYS[1] msgs     LIST (only its TTL is refreshed)
KEYS[2] meta     HASH (field cstate = "<kind>:<value>", counters compactions, tokens_freed;
                 xlen and xwhy, the live length and the reason when compaction gave up)
KEYS[3] archive  LIST (only its TTL is refreshed)
KEYS[4] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] event    advance_turn | compacted | exhausted | warned
ARGV[4] value    the cooldown for `compacted` (< 2^24); the reason for `exhausted` (1 no cut,
                 2 nothing freed, 3 the kept tail over the hard limit); otherwise 0
ARGV[5] freed    tokens a compaction freed (counted with `compacted`), else 0

Returns the new state, or {6, -1, reason} (not allowed; nothing written) or
{5, -1, reason} (the stored state is not one we write).
]]
--- @include "meta"
--- @include "ttl"
--- @include "lost"

local msgs, meta, archive, shared = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, event, value, freed = ARGV[1], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local total, refusal, _, ttl, records, exists = read_meta(meta, WRITES)
if not total then return refusal end
local lost = keys_lost(exists, total, redis.call('LLEN', msgs))
if lost then return lost end
-- A state is recorded as an integer: its kind's number times 2^24, plus its value.
local KINDS, CODES = {'ready', 'compacted', 'cooling', 'exhausted'}, {ready = 0, compacted = 1, cooling = 2, exhausted = 3}
local done = replayed(meta, WRITES, records, op)
if done then return KINDS[math.floor(done / 16777216) + 1] .. ':' .. done % 16777216 end
local raw = redis.call('HGET', meta, 'cstate') or 'ready:0'
local kind, n = string.match(raw, '^(%a+):(%d+)$')
n = tonumber(n)
if not (kind == 'ready' or kind == 'compacted' or kind == 'cooling' or kind == 'exhausted') then
  return {CORRUPT, -1, 'meta field cstate is not a compaction state: ' .. raw}
end

local new_kind, new_n = kind, n
if event == 'advance_turn' then
  if kind == 'compacted' then
    if n > 0 then new_kind = 'cooling' else new_kind, new_n = 'ready', 0 end
  elseif kind == 'cooling' then
    if n > 1 then new_n = n - 1 else new_kind, new_n = 'ready', 0 end
  end
elseif event == 'compacted' then
  if kind == 'compacted' then return {INVALID_TRANSITION, -1, 'cannot record a compaction in state ' .. raw} end
  new_kind, new_n = 'compacted', value
elseif event == 'exhausted' then
  if kind == 'cooling' then return {INVALID_TRANSITION, -1, 'cannot become exhausted from ' .. raw} end
  if kind ~= 'exhausted' then new_kind, new_n = 'exhausted', 0 end
elseif event == 'warned' then
  if kind ~= 'exhausted' or n ~= 0 then return {INVALID_TRANSITION, -1, 'no warning is due in state ' .. raw} end
  new_n = 1
else
  return {INVALID_TRANSITION, -1, 'unknown event ' .. tostring(event)}
end

local state = new_kind .. ':' .. new_n
if not exists or (state == raw and event ~= 'compacted' and event ~= 'exhausted') then return state end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))
commit(meta, WRITES, records, op, CODES[new_kind] * 16777216 + new_n, new_ttl, 'cstate', state)
if event == 'compacted' then
  redis.call('HINCRBY', meta, 'compactions', 1)
  redis.call('HINCRBY', meta, 'tokens_freed', freed)
elseif event == 'exhausted' then
  redis.call('HSET', meta, 'xlen', redis.call('LLEN', msgs), 'xwhy', value)
end
refresh_ttl(ttl, msgs, meta, archive, shared)
return state
