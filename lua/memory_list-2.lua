--[[
memory_list: an owner's memories, the most recently stored first, a page at a time; only
those in every filter set given (a conversation, tags). A memory is one in `recent`: the sets
of a store stopped part way may name one not there yet (see memory_store). The work is in
Redis's own commands (ZREVRANGE, or ZINTER with `recent`), never a sort in Lua.

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
  -- those in `recent` and every set, oldest first: ZINTER orders them by the time `recent`
  -- gives them (the sets weigh 0), equal times by id, as `recent` does
  local args = {'ZINTER', nf + 1, recent}
  for i = 3, 2 + nf do args[#args + 1] = KEYS[i] end
  args[#args + 1] = 'WEIGHTS'
  args[#args + 1] = 1
  for _ = 1, nf do args[#args + 1] = 0 end
  local all = redis.call(unpack(args))
  ids = {}
  for i = #all - offset, math.max(#all - offset - limit + 1, 1), -1 do ids[#ids + 1] = all[i] end
end
if #ids == 0 then return {} end
local records = redis.call('HMGET', docs, unpack(ids))
local out = {}
for i = 1, #ids do
  out[#out + 1] = ids[i]
  out[#out + 1] = records[i] or ''
end
return out
