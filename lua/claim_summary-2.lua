--[[
claim_summary: claim the evicted messages no summary covers and no live claim holds, so
that of the pods completing one turn at once exactly one summarizes them. First drops the
summaries the caller found stale (some of their messages compacted away), freeing their
messages that are still live. A claim expires, so a crashed pod's messages are claimed
again later; a retry by the same claimant gets the same messages.

KEYS[1] summaries  HASH (see includes/summaries.lua)
KEYS[2] meta       HASH (ttl; its existence shows the conversation exists)
ARGV[1] now        the caller's clock, ms
ARGV[2] claim_ms   how long the claim holds
ARGV[3] token      the claimant
ARGV[4] most       the most messages claimed (the oldest free ones)
ARGV[5] nstale     how many stale seqs follow
ARGV[6..]          the stale seqs, then the evicted message ids, oldest first

Returns the 1-based positions (among the ids) of the messages claimed, or -1 when there
is no conversation.
]]
--- @include "summaries_write"

local summaries, meta = KEYS[1], KEYS[2]
local now, claim_ms, token = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local most, nstale = tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('EXISTS', meta) == 0 then return -1 end

if nstale > 0 then
  local stale = {}
  for i = 6, 5 + nstale do
    stale[tonumber(ARGV[i])] = true
    summaries_drop(summaries, ARGV[i], false)
  end
  local kept = {}
  for _, seq in ipairs(summaries_live(summaries)) do
    if not stale[seq] then kept[#kept + 1] = seq end
  end
  summaries_set_live(summaries, kept)
end

local claimed = {}
local mark = 'c' .. (now + claim_ms) .. ':' .. token
for i = 6 + nstale, #ARGV do
  if #claimed >= most then break end
  local state = redis.call('HGET', summaries, 'i:' .. ARGV[i])
  local free = not state
  if state and string.sub(state, 1, 1) == 'c' then
    local colon = string.find(state, ':', 2, true)
    local expires = tonumber(string.sub(state, 2, colon - 1))
    free = expires <= now or string.sub(state, colon + 1) == token
  end
  if free then
    redis.call('HSET', summaries, 'i:' .. ARGV[i], mark)
    claimed[#claimed + 1] = i - 5 - nstale
  end
end
summaries_follow_ttl(summaries, meta)
return claimed
