--[[
memory_store: keep one memory of an owner (redis_history/context/redis_memory.py), or merge it
into the owner's memory with the same normalized text: the stored time moves to now, the
conversation and tags are added, the extra metadata is updated. A retried store merges into
what the first one stored, so it is applied once.

The record holds only strings (and its length): the extra metadata as the JSON text of each
value ("m"), and the times as decimal text, so that cjson, which rounds numbers to 14 digits
and writes an empty list as {}, never changes what the caller stored.

KEYS[1] stats    HASH  seq (the last id), docs (memories), len (their terms in all)
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] dedup    HASH  normalized-text hash -> id
KEYS[4] recent   ZSET  id -> last stored (ms)
then nc conversation sets (0 or 1), nt tag sets, and one postings HASH per distinct term
ARGV[1] hash     the normalized text's hash
ARGV[2] now      ms
ARGV[3] record   the new memory's record (JSON; a merge reads only its "c", "g" and "m")
ARGV[4] length   the memory's length in terms
ARGV[5] nc       conversation sets given (0 or 1)
ARGV[6] nt       tag sets given
ARGV[7..] one posting per term key, in order: length * 1000 + the term's frequency

Returns {id, 1} for a new memory, {id, 0} for a merge.
]]
local stats, docs, dedup, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hash, now = ARGV[1], ARGV[2]
local sets = 4 + tonumber(ARGV[5]) + tonumber(ARGV[6])

local id = redis.call('HGET', dedup, hash)
if id then
  local old = redis.call('HGET', docs, id)
  if old then
    local record, new = cjson.decode(old), cjson.decode(ARGV[3])
    for _, field in ipairs({'c', 'g'}) do
      local have, list = {}, record[field]
      if type(list) ~= 'table' or next(list) == nil then list = {} end
      for _, v in ipairs(list) do have[v] = true end
      for _, v in ipairs(new[field]) do
        if not have[v] then list[#list + 1] = v; have[v] = true end
      end
      record[field] = list
    end
    if type(record.m) ~= 'table' then record.m = {} end
    for k, v in pairs(new.m) do record.m[k] = v end  -- each value is its JSON text, copied
    record.up = now
    redis.call('HSET', docs, id, cjson.encode(record))
    for i = 5, sets do redis.call('SADD', KEYS[i], id) end
    redis.call('ZADD', recent, now, id)
    return {id, 0}
  end
end

id = tostring(redis.call('HINCRBY', stats, 'seq', 1))
redis.call('HSET', docs, id, ARGV[3])
redis.call('HSET', dedup, hash, id)
redis.call('ZADD', recent, now, id)
redis.call('HINCRBY', stats, 'docs', 1)
redis.call('HINCRBY', stats, 'len', ARGV[4])
for i = 5, sets do redis.call('SADD', KEYS[i], id) end
for i = sets + 1, #KEYS do redis.call('HSET', KEYS[i], id, ARGV[i - sets + 6]) end
return {id, 1}
