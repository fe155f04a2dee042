-- The manager's shared summaries: one hash beside the conversation's keys.
--   live      JSON array of the kept summaries' seqs, oldest first
--   seq       the last seq given
--   s:<seq>   a summary: JSON {text, ids, token}
--   t:<token> the seq the store named by that token wrote (a retried store is applied once)
--   i:<id>    the message's state: s<seq> summarized by that summary, x summarized by one
--             dropped at the cap, c<expires ms>:<token> claimed by a pod summarizing it

-- The hash follows the conversation's stored TTL (no TTL: none).
local function summaries_follow_ttl(summaries, meta)
  local ttl = tonumber(redis.call('HGET', meta, 'ttl') or '')
  if ttl and ttl > 0 then
    redis.call('PEXPIRE', summaries, ttl)
  else
    redis.call('PERSIST', summaries)
  end
end

local function summaries_live(summaries)
  local raw = redis.call('HGET', summaries, 'live')
  if not raw then return {} end
  return cjson.decode(raw)
end
