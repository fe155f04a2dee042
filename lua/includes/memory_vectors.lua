-- The vectors of an owner's memories: in a vector set where the server has them (Redis 8),
-- else as float32 strings in a hash. Both hold one normalized vector per memory id, of the
-- embedder the stats hash names under "emb" ("<name>/<dimensions>"); a vector is added with
-- `VADD ... NOQUANT` (or HSET), and removed with VREM (and HDEL) by memory_forget.
--- @include "codes"

-- 'set' or 'hash': where this server keeps vectors (nil and an error reply if it refuses
-- the probe for another reason, such as an ACL rule without the vector commands).
local function vector_mode(vset)
  local found = redis.pcall('VCARD', vset)
  if type(found) == 'table' and found.err then
    if string.find(found.err, 'nknown') then return 'hash' end
    return nil, found
  end
  return 'set'
end

-- {MISMATCH, -1, reason} when the owner's vectors were made by another embedder than `emb`.
local function other_embedder(stats, emb)
  local have = redis.call('HGET', stats, 'emb')
  if have and have ~= emb then
    return {MISMATCH, -1, stats .. ': the memories were embedded by ' .. have
      .. ', not by ' .. emb .. '; to change, reindex with rebuild (redis-history memory reindex --rebuild)'}
  end
end
