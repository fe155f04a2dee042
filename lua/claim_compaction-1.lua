--[[
claim_compaction: reserve the conversation's one pending compaction, so that
however many pods ask at once, exactly one enqueues a job. A retry by the
holder of the claim gets it again; a conversation that does not exist is not claimed.

KEYS[1] meta     HASH (fields queued = job id, queued_at = ms; total shows the conversation exists)
ARGV[1] job_id   the job the caller will enqueue
ARGV[2] now      the caller's clock, ms
ARGV[3] stale    ms after which an unreleased claim is presumed lost

Returns 1 when claimed, 0 when another claim is live or there is no conversation.
]]

local meta = KEYS[1]
local job_id, now, stale = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local f = redis.call('HMGET', meta, 'total', 'queued', 'queued_at')
if not f[1] then return 0 end
if f[2] == job_id then return 1 end
local claimed_at = tonumber(f[3] or '')
if f[2] and claimed_at and now - claimed_at < stale then return 0 end
redis.call('HSET', meta, 'queued', job_id, 'queued_at', now)
return 1
