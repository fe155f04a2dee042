--[[
read_summaries: the kept summaries, oldest first. The hash follows the conversation's TTL
from each read too; one left without its conversation (expired, deleted) is deleted.

What it returns is bounded whatever the hash holds: at most MAX_SUMMARIES records, each
field's length measured (HSTRLEN) before it is read, texts of at most MAX_SUMMARY_BYTES and
covers of at most MAX_COVER_BYTES, all read in one HMGET.

KEYS[1] summaries  HASH (see includes/summaries.lua)
KEYS[2] meta       HASH (ttl; its existence shows the conversation exists)

Returns {{seq, text, cover}, ...}, empty when there are none; or {5, -1, reason} (a corrupt
hash).
]]
--- @include "summaries"

local summaries, meta = KEYS[1], KEYS[2]
if redis.call('EXISTS', meta) == 0 then
  redis.call('DEL', summaries)
  return {}
end
local live, refusal = summaries_live(summaries)
if not live then return refusal end
local out = {}
if #live > 0 then
  local names = {}
  for _, seq in ipairs(live) do
    if redis.call('HSTRLEN', summaries, 's:' .. seq) > MAX_SUMMARY_BYTES
        or redis.call('HSTRLEN', summaries, 'r:' .. seq) > MAX_COVER_BYTES then
      return {CORRUPT, -1, 'shared summary ' .. seq .. ' is larger than a summary can be: delete the summaries key (they are made again)'}
    end
    names[#names + 1] = 's:' .. seq
    names[#names + 1] = 'r:' .. seq
  end
  local fields = redis.call('HMGET', summaries, unpack(names))
  for i, seq in ipairs(live) do
    local text, cover = fields[2 * i - 1], fields[2 * i]
    if text and cover then out[#out + 1] = {tonumber(seq), text, cover} end
  end
end
summaries_follow_ttl(summaries, meta)
return out
