--[[
memory_unembed: drop every vector of an owner and the embedder they were made by, so that
another embedder's can be made (memory reindex with rebuild). The memories stay, recalled by
keywords until they are embedded again.

KEYS[1] stats    HASH  emb (the embedder of the vectors)
KEYS[2] vset     VECTORSET  id -> vector
KEYS[3] vhash    HASH  id -> vector (float32)

Returns 1 when there were vectors or an embedder to drop, else 0; {CORRUPT, -1, reason} when a
key is not what the memory writes, having written nothing.
]]
--- @include "memory_types"
local bad = check_types(1, 1, 'hash') or check_types(2, 2, 'vectorset') or check_types(3, 3, 'hash')
if bad then return bad end
local dropped = redis.call('HDEL', KEYS[1], 'emb') + redis.call('DEL', KEYS[2], KEYS[3])
if dropped > 0 then return 1 end
return 0
