--[[
release_claim: drop the pending-compaction claim if it is still the caller's.
Applied once per op: a retry of a release that happened answers as it did.

KEYS[1] meta     HASH (fields queued, queued_at)
ARGV[1] op       the operation token (derived from the job id)
ARGV[2] job_id   the job whose claim to release

Returns 1 if released, 0 if the claim belonged to another job (or none).
]]
--- @include "meta"

local meta = KEYS[1]
local op = ARGV[1]
local total, refusal, _, _, records, exists = read_meta(meta, WRITES)
if not total then return refusal end
if replayed(meta, WRITES, records, op) then return 1 end
if redis.call('HGET', meta, 'queued') ~= ARGV[2] then return 0 end
redis.call('HDEL', meta, 'queued', 'queued_at')
commit(meta, WRITES, records, op, nil, nil)
return 1
