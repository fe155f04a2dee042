-- Writing a memory's vector where lua/includes/memory_vectors.lua says the server keeps them.

-- Keep `blob` (normalized little-endian float32) as memory `id`'s vector, and `emb` as the
-- owner's embedder.
local function put_vector(mode, stats, vset, vhash, id, blob, emb)
  if mode == 'set' then
    redis.call('VADD', vset, 'FP32', blob, id, 'NOQUANT')
  else
    redis.call('HSET', vhash, id, blob)
  end
  redis.call('HSET', stats, 'emb', emb)
end
