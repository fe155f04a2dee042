-- The manager's shared summaries: one hash beside the conversation's keys.
--   seq       the last seq given
--   live      the kept summaries' seqs, oldest first, separated by spaces
--   s:<seq>   a summary's text
--   r:<seq>   what it covers: "<count>:<digest>:<token>:<first id>", a run of count
--             consecutive messages from the first id, digest the hex of a digest of their ids
--             (redis_history/store/_summaries.py), token the store's
--   t:<token> the seq the store named by that token wrote (a retried store is applied once)
--   f:<seq>   present once that summary was dropped as stale: its messages are free again
--   i:<digest> a message's state, by the digest of its id (DIGEST bytes): <seq> summarized
--             by that summary (kept, or dropped at the cap; free again when f:<seq> is
--             there), c<expires ms>:<token> claimed by a pod
-- A read returns at most MAX_SUMMARIES records of MAX_SUMMARY_BYTES of text and MAX_COVER_BYTES
-- of r:<seq> (redis_history/limits.py MAX_SUMMARIES_READ_BYTES; a test keeps these equal).
--- @include "codes"
local MAX_SUMMARIES, MAX_SUMMARY_BYTES, MAX_SUMMARY_MESSAGES, MAX_COVER_BYTES, DIGEST = 64, 16384, 1000, 1095, 8

-- The hash follows the conversation's stored TTL (no TTL: none).
local function summaries_follow_ttl(summaries, meta)
  local ttl = tonumber(redis.call('HGET', meta, 'ttl') or '')
  if ttl and ttl > 0 then
    redis.call('PEXPIRE', summaries, ttl)
  else
    redis.call('PERSIST', summaries)
  end
end

-- The kept seqs (strings), oldest first; or nil and a refusal when the field holds more than
-- MAX_SUMMARIES of them (measured before it is read, so the work is bounded whatever it holds).
local function summaries_live(summaries)
  local corrupt = {CORRUPT, -1, 'the shared summaries field live holds more than ' .. MAX_SUMMARIES .. ' summaries: delete the summaries key (they are made again)'}
  if redis.call('HSTRLEN', summaries, 'live') > MAX_SUMMARIES * 20 then return nil, corrupt end
  local live = {}
  for seq in string.gmatch(redis.call('HGET', summaries, 'live') or '', '%d+') do
    live[#live + 1] = seq
  end
  if #live > MAX_SUMMARIES then return nil, corrupt end
  return live
end
