--[[
memory_list: an owner's memories, the most recently stored first, a page at a time; only
those in every filter set given (a conversation, tags). A memory is one in `recent`: the sets
of a store stopped part way may name one not there yet (see memory_store).

KEYS[1] docs     HASH  id -> record (JSON)
KEYS[2] recent   ZSET  id -> last stored (ms)
then nf filter sets
ARGV[1] offset   memories skipped (>= 0)
ARGV[2] limit    the most memories returned (> 0)
ARGV[3] nf       filter sets given

Returns {id, record, ...}, or {CORRUPT, -1, reason} when a key is not what the memory writes.
]]
--- @include "memory_types"
local docs, recent = KEYS[1], KEYS[2]
local offset, limit, nf = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local bad = check_types(1, 1, 'hash') or check_types(2, 2, 'zset') or check_types(3, 2 + nf, 'set')
if bad then return bad end
local ids
if nf == 0 then
  ids = redis.call('ZREVRANGE', recent, offset, offset + limit - 1)
else
  local all, up = {}, {}
  for _, id in ipairs(redis.call('SINTER', unpack(KEYS, 3, 2 + nf))) do
    local stored = redis.call('ZSCORE', recent, id)
    if stored then all[#all + 1] = id; up[id] = tonumber(stored) end
  end
  table.sort(all, function(x, y)
    if up[x] ~= up[y] then return up[x] > up[y] end
    return tonumber(x) > tonumber(y)
  end)
  ids = {}
  for i = offset + 1, math.min(offset + limit, #all) do ids[#ids + 1] = all[i] end
end
if #ids == 0 then return {} end
local records = redis.call('HMGET', docs, unpack(ids))
local out = {}
for i = 1, #ids do
  out[#out + 1] = ids[i]
  out[#out + 1] = records[i] or ''
end
return out
