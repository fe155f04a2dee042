--[[
release_claim: drop the pending-compaction claim if it is still the caller's.

KEYS[1] meta     HASH (fields queued, queued_at)
ARGV[1] job_id   the job whose claim to release

Returns 1 if released, 0 if the claim belonged to another job (or none).
]]

if redis.call('HGET', KEYS[1], 'queued') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'queued', 'queued_at')
return 1
