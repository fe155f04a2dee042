--[[
memory_forget: remove one memory of an owner, if it is still the record the caller read (its
terms, conversations and tags name the keys given).

KEYS[1] stats    HASH  seq, docs, len
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] dedup    HASH  normalized-text hash -> id
KEYS[4] recent   ZSET  id -> last stored (ms)
then every set (conversations, tags) and postings HASH (terms) the record names
ARGV[1] id       the memory
ARGV[2] record   the record as the caller read it
ARGV[3] hash     its normalized text's hash
ARGV[4] length   its length in terms
ARGV[5] ns       how many of the keys after KEYS[4] are sets (the rest are postings)

Returns 1 when it removed the memory, 0 when there was none, -1 when the record changed
since it was read (nothing is removed; read it again), or {CORRUPT, -1, reason} having
removed nothing when a key or a stats field is not what the memory writes.
]]
--- @include "memory_types"
--- @include "memory_counts"
local stats, docs, dedup, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local sets = 4 + tonumber(ARGV[5])
local bad = check_types(1, 3, 'hash') or check_types(4, 4, 'zset') or check_types(5, sets, 'set')
  or check_types(sets + 1, #KEYS, 'hash')
if bad then return bad end
local _, bad = read_counts(stats, 'docs', 'len')
if bad then return bad end
local record = redis.call('HGET', docs, id)
if not record then return 0 end
if record ~= ARGV[2] then return -1 end
for i = 5, sets do redis.call('SREM', KEYS[i], id) end
for i = sets + 1, #KEYS do redis.call('HDEL', KEYS[i], id) end
redis.call('HDEL', docs, id)
redis.call('ZREM', recent, id)
if redis.call('HGET', dedup, ARGV[3]) == id then redis.call('HDEL', dedup, ARGV[3]) end
redis.call('HINCRBY', stats, 'docs', -1)
redis.call('HINCRBY', stats, 'len', -tonumber(ARGV[4]))
return 1
