--[[
memory_embed: keep the vectors the caller made of memories memory_unembedded returned, each
only if the memory's record is still the one it read (a memory forgotten or merged meanwhile
is left to the next pass).

KEYS[1] stats    HASH  emb (the embedder of the vectors)
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] vset     VECTORSET  id -> vector
KEYS[4] vhash    HASH  id -> vector (float32)
ARGV[1] emb      the embedder ("<name>/<dimensions>")
then, per memory: its id, the record read, its vector (normalized little-endian float32)

Returns how many vectors it kept; or {MISMATCH, -1, reason} when the owner's vectors were made
by another embedder, {CORRUPT, -1, reason} when a key is not what the memory writes, having
written nothing.
]]
--- @include "memory_types"
--- @include "memory_vectors"
--- @include "memory_vector_put"
local stats, docs, vset, vhash, emb = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local bad = check_types(1, 2, 'hash') or check_types(3, 3, 'vectorset') or check_types(4, 4, 'hash')
if bad then return bad end
bad = other_embedder(stats, emb)
if bad then return bad end
local mode, refused = vector_mode(vset)
if not mode then return refused end
local kept = 0
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('HGET', docs, id) == ARGV[i + 1] then
    put_vector(mode, stats, vset, vhash, id, ARGV[i + 2], emb)
    kept = kept + 1
  end
end
return kept
