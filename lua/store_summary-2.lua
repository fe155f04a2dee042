--[[
store_summary: keep a summary of the run of messages its claim holds, marking them
summarized by it; only while every one of them is still claimed by its token (a claim that
expired and was taken by another pod is refused, nothing written). Past the cap the oldest
summaries are dropped (their messages stay marked summarized, so they are not summarized
again). A retry of a store (the same token) is applied once.

The work is bounded whatever the hash holds: one HMGET of at most MAX_SUMMARY_MESSAGES
fields, one HSET of 3 more, and 3 commands of a few fields per summary dropped at the cap.

KEYS[1] summaries  HASH (see includes/summaries.lua)
KEYS[2] meta       HASH (ttl; its existence shows the conversation exists)
ARGV[1] token      the store's token (the claimant's)
ARGV[2] kept       the most summaries kept
ARGV[3] text       the summary
ARGV[4] cover      what it covers, r:<seq>'s value
ARGV[5] digests    the digests of the ids it covers, DIGEST bytes each (at least one)

Returns the summary's seq; 0 when there is no conversation; -1 when a message it covers is
no longer claimed by the token (nothing written); or {5, -1, reason} (a corrupt hash).
]]
--- @include "summaries_write"

local summaries, meta = KEYS[1], KEYS[2]
local token, kept, digests = ARGV[1], tonumber(ARGV[2]), ARGV[5]
if redis.call('EXISTS', meta) == 0 then return 0 end
local done = redis.call('HGET', summaries, 't:' .. token)
if done then return tonumber(done) end
local live, refusal = summaries_live(summaries)
if not live then return refusal end

local names = {}
for at = 1, #digests - DIGEST + 1, DIGEST do
  names[#names + 1] = 'i:' .. string.sub(digests, at, at + DIGEST - 1)
end
for _, state in ipairs(redis.call('HMGET', summaries, unpack(names))) do
  if not state or string.match(state, '^c%d+:(%w+)$') ~= token then return -1 end
end

local seq = redis.call('HINCRBY', summaries, 'seq', 1)
local fields = {'s:' .. seq, ARGV[3], 'r:' .. seq, ARGV[4], 't:' .. token, seq}
for _, name in ipairs(names) do
  fields[#fields + 1] = name
  fields[#fields + 1] = seq
end
redis.call('HSET', summaries, unpack(fields))
live[#live + 1] = tostring(seq)
local over = #live - kept
if over > 0 then
  local rest = {}
  for i = 1, #live do
    if i <= over then summaries_drop(summaries, live[i], false) else rest[#rest + 1] = live[i] end
  end
  live = rest
end
summaries_set_live(summaries, live)
summaries_follow_ttl(summaries, meta)
return seq
