--[[
store_summary: keep a summary of the messages it names, marked as summarized by it; past
the cap the oldest summary is dropped (its messages stay marked summarized, so they are
not summarized again). A retry of a store (the same token) is applied once.

KEYS[1] summaries  HASH (see includes/summaries.lua)
KEYS[2] meta       HASH (ttl; its existence shows the conversation exists)
ARGV[1] token      the store's token (the claimant's)
ARGV[2] kept       the most summaries kept
ARGV[3] record     JSON {text, ids, token}
ARGV[4..]          the ids it covers

Returns the summary's seq, or 0 when there is no conversation.
]]
--- @include "summaries_write"

local summaries, meta = KEYS[1], KEYS[2]
local token, kept = ARGV[1], tonumber(ARGV[2])
if redis.call('EXISTS', meta) == 0 then return 0 end
local done = redis.call('HGET', summaries, 't:' .. token)
if done then return tonumber(done) end

local seq = redis.call('HINCRBY', summaries, 'seq', 1)
redis.call('HSET', summaries, 's:' .. seq, ARGV[3], 't:' .. token, seq)
for i = 4, #ARGV do redis.call('HSET', summaries, 'i:' .. ARGV[i], 's' .. seq) end
local live = summaries_live(summaries)
live[#live + 1] = seq
while #live > kept do
  summaries_drop(summaries, live[1], 'x')
  table.remove(live, 1)
end
summaries_set_live(summaries, live)
summaries_follow_ttl(summaries, meta)
return seq
