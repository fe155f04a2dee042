--[[
claim_summary: claim the oldest run of consecutive evicted messages that no summary covers
and no live claim holds, so that of the pods completing one turn at once exactly one
summarizes them. First drops the kept summaries the caller found stale (some of their
messages compacted away), freeing their messages. A claim expires, so a crashed pod's
messages are claimed again later; a retry by the same claimant gets the same messages.

The work is bounded whatever the hash holds: each stale summary 3 commands of a few fields,
the messages' states read in HMGETs of at most CHUNK fields (stopping where the run ends),
each with at most one HMGET of the stale marks of the seqs they name, the claim one HSET.

KEYS[1] summaries  HASH (see includes/summaries.lua)
KEYS[2] meta       HASH (ttl; its existence shows the conversation exists)
ARGV[1] now        the caller's clock, ms
ARGV[2] claim_ms   how long the claim holds
ARGV[3] token      the claimant
ARGV[4] most       the most messages claimed (at most MAX_SUMMARY_MESSAGES)
ARGV[5] nstale     how many stale seqs follow
ARGV[6..]          the stale seqs, then the digests of the evicted message ids, oldest first

Returns {first, n}: the run claimed, n messages from the 1-based position first among the
digests ({0, 0}: none); -1 when there is no conversation; or {5, -1, reason} (a corrupt hash)
having written nothing.
]]
--- @include "summaries_write"

local CHUNK = 1000
local summaries, meta = KEYS[1], KEYS[2]
local now, claim_ms, token = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local most, nstale = math.min(tonumber(ARGV[4]), MAX_SUMMARY_MESSAGES), tonumber(ARGV[5])
if redis.call('EXISTS', meta) == 0 then return -1 end
local live, refusal = summaries_live(summaries)
if not live then return refusal end

local kept = {}  -- the kept seqs: their messages are summarized
for _, seq in ipairs(live) do kept[seq] = true end
if nstale > 0 then
  local stale, rest = {}, {}
  for i = 6, 5 + nstale do stale[ARGV[i]] = true end
  for _, seq in ipairs(live) do
    if stale[seq] then
      summaries_drop(summaries, seq, true)
      kept[seq] = nil
    else
      rest[#rest + 1] = seq
    end
  end
  if #rest < #live then summaries_set_live(summaries, rest) end
end

local base = 5 + nstale  -- ARGV[base + k] is the k-th digest
local first, n, ended, claimed = 0, 0, false, {}
local freed = {}  -- seq -> whether it was dropped as stale, for seqs no longer kept
local mark = 'c' .. (now + claim_ms) .. ':' .. token
local from = base + 1
while from <= #ARGV and not ended do
  local to = math.min(#ARGV, from + CHUNK - 1)
  local names = {}
  for i = from, to do names[#names + 1] = 'i:' .. ARGV[i] end
  local states = redis.call('HMGET', summaries, unpack(names))
  local marks = {}
  for k = 1, #names do
    local seq = states[k] and string.match(states[k], '^%d+$')
    if seq and not kept[seq] and freed[seq] == nil then
      freed[seq] = false
      marks[#marks + 1] = 'f:' .. seq
    end
  end
  if #marks > 0 then
    for j, found in ipairs(redis.call('HMGET', summaries, unpack(marks))) do
      freed[string.sub(marks[j], 3)] = found ~= false
    end
  end
  for k = 1, #names do
    local state, free = states[k], not states[k]
    if state then
      local expires, owner = string.match(state, '^c(%d+):(%w+)$')
      if expires then
        free = tonumber(expires) <= now or owner == token
      else
        free = freed[state] == true
      end
    end
    if free then
      if n == 0 then first = from + k - 1 - base end
      n = n + 1
      claimed[#claimed + 1] = names[k]
      claimed[#claimed + 1] = mark
    end
    if (n > 0 and not free) or n >= most then
      ended = true
      break
    end
  end
  from = to + 1
end
if n > 0 then redis.call('HSET', summaries, unpack(claimed)) end
summaries_follow_ttl(summaries, meta)
return {first, n}
