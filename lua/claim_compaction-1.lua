--[[
claim_compaction: reserve the conversation's one pending compaction, so that
however many pods ask at once, exactly one enqueues a job.

KEYS[1] meta     HASH (fields queued = job id, queued_at = ms)
ARGV[1] job_id   the job the caller will enqueue
ARGV[2] now      the caller's clock, ms
ARGV[3] stale    ms after which an unreleased claim is presumed lost

Returns 1 when claimed, 0 when another claim is live.
]]

local meta = KEYS[1]
local job_id, now, stale = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local claimed_at = tonumber(redis.call('HGET', meta, 'queued_at') or '')
if claimed_at and now - claimed_at < stale and redis.call('HEXISTS', meta, 'queued') == 1 then
  return 0
end
redis.call('HSET', meta, 'queued', job_id, 'queued_at', now)
return 1
