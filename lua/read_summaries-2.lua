--[[
read_summaries: the kept summaries, oldest first. The hash follows the conversation's TTL
from each read too; one left without its conversation (expired, deleted) is deleted.

KEYS[1] summaries  HASH (see includes/summaries.lua)
KEYS[2] meta       HASH (ttl; its existence shows the conversation exists)

Returns {seq, record, seq, record, ...}, empty when there are none.
]]
--- @include "summaries"

local summaries, meta = KEYS[1], KEYS[2]
if redis.call('EXISTS', meta) == 0 then
  redis.call('DEL', summaries)
  return {}
end
local out = {}
for _, seq in ipairs(summaries_live(summaries)) do
  local record = redis.call('HGET', summaries, 's:' .. seq)
  if record then
    out[#out + 1] = seq
    out[#out + 1] = record
  end
end
summaries_follow_ttl(summaries, meta)
return out
