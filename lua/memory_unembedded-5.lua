--[[
memory_unembedded: up to `limit` of an owner's memories that have no vector yet (stored before
the owner had an embedder, or by a memory given none), newest first, with their records, for
the caller to embed (memory_embed).

KEYS[1] stats    HASH  emb (the embedder of the vectors)
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] recent   ZSET  id -> last stored (ms)
KEYS[4] vset     VECTORSET  id -> vector
KEYS[5] vhash    HASH  id -> vector (float32)
ARGV[1] emb      the embedder ("<name>/<dimensions>")
ARGV[2] limit    the most memories returned

Returns {id, record, ...}; or {MISMATCH, -1, reason} when the owner's vectors were made by
another embedder, {CORRUPT, -1, reason} when a key is not what the memory writes.
]]
--- @include "memory_types"
--- @include "memory_vectors"
local stats, docs, recent, vset, vhash = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local bad = check_types(1, 2, 'hash') or check_types(3, 3, 'zset')
  or check_types(4, 4, 'vectorset') or check_types(5, 5, 'hash')
if bad then return bad end
bad = other_embedder(stats, ARGV[1])
if bad then return bad end
local mode, refused = vector_mode(vset)
if not mode then return refused end
local limit, out = tonumber(ARGV[2]), {}
for _, id in ipairs(redis.call('ZREVRANGE', recent, 0, -1)) do
  local held
  if mode == 'set' then held = redis.call('VISMEMBER', vset, id) else held = redis.call('HEXISTS', vhash, id) end
  if held == 0 then
    local record = redis.call('HGET', docs, id)
    if record then
      out[#out + 1] = id
      out[#out + 1] = record
      if #out >= 2 * limit then break end
    end
  end
end
return out
