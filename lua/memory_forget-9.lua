--[[
memory_forget: remove one memory of an owner, if it is still the record the caller read (its
terms, conversations and tags name the keys given); or supersede it: remove it the same way
but keep the record the caller gives in its place (the old one pointing to its successor) and
list it in `past`, which keeps the `most` latest (older superseded records are dropped); or
drop a superseded record.

As in memory_store, every check comes first, and the writes are ordered so that a forget
stopped part way is finished by running it again: one HSET takes the memory out of the counts
and notes it in the stats hash twice, by its id and by its text's hash; then it leaves
`recent` (it is no longer listed), its sets, postings and vector, then its record, its dedup entry,
and last one HDEL clears both notes. Until then a store of the same text finds the memory by
the hash note and has this forget finished first (memory_store), and this script run again
once the record is gone finds the hash by the id note.

KEYS[1] stats    HASH  seq, docs, len, and the notes of unfinished stores and forgets:
                       "-" .. id -> hash and "-" .. hash -> id while this one is
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] dedup    HASH  normalized-text hash -> id
KEYS[4] recent   ZSET  id -> last stored (ms)
KEYS[5] vset     VECTORSET  id -> vector (lua/includes/memory_vectors.lua)
KEYS[6] vhash    HASH  id -> vector, where the server has no vector sets
KEYS[7] used     ZSET  id -> last stored or recalled (ms)
KEYS[8] expires  ZSET  id -> when it expires (ms)
KEYS[9] past     ZSET  id -> when it was superseded (ms)
then every set (conversations, tags) and postings HASH (terms) the record names
ARGV[1] id       the memory
ARGV[2] record   the record as the caller read it ('' if it found none)
ARGV[3] hash     its normalized text's hash
ARGV[4] length   its length in terms
ARGV[5] ns       how many of the keys after KEYS[9] are sets (the rest are postings)
ARGV[6] keep     '' to forget the memory; '!' to drop the superseded record read; else the
         record to keep in its place, superseded
ARGV[7] now      ms (when it was superseded)
ARGV[8] most     the most superseded records the owner keeps

Returns 1 when it removed (or superseded) the memory (a supersede sent again after its reply
was lost finds the record it keeps and answers 1 again), 0 when there was none or it was
superseded meanwhile, -1 when the record changed since it was read (nothing is removed; read
it again), or {CORRUPT, -1, reason} having
removed nothing when a key or a stats field is not what the memory writes.
]]
--- @include "memory_types"
--- @include "memory_counts"
local stats, docs, dedup, recent, vset, vhash = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local used, expires, past = KEYS[7], KEYS[8], KEYS[9]
local id, keep = ARGV[1], ARGV[6]
local sets = 9 + tonumber(ARGV[5])
local bad = check_types(1, 3, 'hash') or check_types(4, 4, 'zset')
  or check_types(5, 5, 'vectorset') or check_types(6, 6, 'hash') or check_types(7, 9, 'zset')
  or check_types(10, sets, 'set')
  or check_types(sets + 1, #KEYS, 'hash')
if bad then return bad end
local counts, bad = read_counts(stats, 'docs', 'len')
if bad then return bad end
local record, note = redis.call('HGET', docs, id), '-' .. id

-- the writes after the record's: what of the text's `hash` still names the memory, then the notes
local function finish(hash)
  if redis.call('HGET', dedup, hash) == id then redis.call('HDEL', dedup, hash) end
  if redis.call('HGET', stats, '+' .. hash) == id then redis.call('HDEL', stats, '+' .. hash) end
  redis.call('HDEL', stats, note, '-' .. hash)
end

if not record then
  local hash = redis.call('HGET', stats, note)
  if hash then finish(hash) end  -- a forget stopped after it removed the record
  return 0
end
if record ~= ARGV[2] then
  if redis.call('ZSCORE', past, id) then  -- superseded meanwhile (or by a run stopped part way)
    local hash = redis.call('HGET', stats, note)
    if hash then finish(hash) end
    if record == keep then return 1 end  -- by this very call, sent again after a lost reply
    return 0
  end
  return -1
end
if keep == '!' then
  redis.call('ZREM', past, id)
  redis.call('HDEL', docs, id)
  return 1
end
local hash = ARGV[3]
if redis.call('HEXISTS', stats, note) == 0 then
  redis.call('HSET', stats, 'docs', string.format('%d', counts[1] - 1),
    'len', string.format('%d', counts[2] - tonumber(ARGV[4])), note, hash, '-' .. hash, id)
end
redis.call('ZREM', recent, id)
redis.call('ZREM', used, id)
redis.call('ZREM', expires, id)
for i = 10, sets do redis.call('SREM', KEYS[i], id) end
for i = sets + 1, #KEYS do redis.call('HDEL', KEYS[i], id) end
if redis.call('EXISTS', vset) == 1 then redis.call('VREM', vset, id) end
redis.call('HDEL', vhash, id)
if keep == '' then
  redis.call('HDEL', docs, id)
else
  redis.call('ZADD', past, ARGV[7], id)
  redis.call('HSET', docs, id, keep)
  local over = redis.call('ZCARD', past) - tonumber(ARGV[8])
  if over > 0 then
    for _, old in ipairs(redis.call('ZRANGE', past, 0, over - 1)) do
      redis.call('ZREM', past, old)
      redis.call('HDEL', docs, old)
    end
  end
end
finish(hash)
return 1
