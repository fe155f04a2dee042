--[[
memory_store: keep one memory of an owner (redis_history/memory/redis_memory.py), or merge it
into the owner's memory with the same normalized text: the stored time moves to now, the
conversation and tags are added, the extra metadata is updated. A retried store merges into
what the first one stored, so it is applied once. A text the caller found to restate another
memory of the owner (`into`) merges into that one the same way, which keeps its own text.

Every check is made before the first write. The writes are ordered so that a store stopped
part way (Redis keeps what a script wrote before an error) is never half visible, and the
same store run again finishes it: one HSET takes the id, counts the memory and notes it in
the stats hash under "+hash"; then come its dedup entry, sets and postings, then its record,
then its place in `recent` (from then on it is listed and recalled), and last the note is
cleared. Its vector, when one is given, is written with its postings (a merge writes it too,
so that a memory stored before the owner had vectors gets one). A merge adds the sets before it rewrites the record. A memory with this text that a
forget stopped part way is still being removed (memory_forget notes it under "-hash"): the
store then writes nothing and replies with its id, to have that forget finished first and
the store sent again, which keeps a new memory.

A memory with a time to live is in `expires` until it expires, a merge setting it anew (or
taking it out); every memory is in `used`, by when it was last stored or recalled. A full
owner refuses a new memory, or, told to evict, names its least recently used memory for the
caller to forget first (then the store is sent again).

The record is a JSON object: t the text, c its conversations, g its tags, m its extra
metadata, at and up when first and last stored (ms), n its length in terms, k its terms, s
how they were made (a record stored before had none), x the ids of the messages it came from
(its provenance, united by merges up to 64; a record stored before had none), ex when it
expires (ms; none: never), and, once superseded (memory_forget), by its successor's id. It
holds only strings (and n): each metadata value as its JSON text and the times as decimal
text, so that cjson, which rounds numbers to 14 digits and writes an empty list as {}, never
changes what the caller stored.

KEYS[1] stats    HASH  seq (the last id), docs (memories), len (their terms in all), terms
                       (the scheme of every memory's terms),
                       "+" .. hash -> id while that store is unfinished,
                       "-" .. hash -> id while a forget of that memory is
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] dedup    HASH  normalized-text hash -> id
KEYS[4] recent   ZSET  id -> last stored (ms)
KEYS[5] vset     VECTORSET  id -> vector (Redis 8; lua/includes/memory_vectors.lua)
KEYS[6] vhash    HASH  id -> vector (float32), where the server has no vector sets
KEYS[7] used     ZSET  id -> last stored or recalled (ms)
KEYS[8] expires  ZSET  id -> when it expires (ms)
KEYS[9] past     ZSET  id -> when it was superseded (ms)
then nc conversation sets (0 or 1), nt tag sets, and one postings HASH per distinct term
ARGV[1] hash     the normalized text's hash
ARGV[2] now      ms
ARGV[3] record   the new memory's record (JSON; a merge reads only its "c", "g" and "m")
ARGV[4] length   the memory's length in terms
ARGV[5] nc       conversation sets given (0 or 1)
ARGV[6] nt       tag sets given
ARGV[7..10] the limits: memories of an owner (its cap), then tags, conversations and bytes of extra
         metadata (keys and JSON texts) of one memory
ARGV[11] emb      the embedder ("<name>/<dimensions>"), or '' for no vector
ARGV[12] vector   the memory's vector, little-endian float32, normalized ('' for none)
ARGV[13] scheme   how the terms were made (memory_unindexed), recorded in the stats hash
         ("terms") by the owner's first memory
ARGV[14] into     the id of a memory of the owner this one restates (found by meaning), to
         merge into if it is still there and this text is no other memory's; or ''
ARGV[15] expires  when the memory expires (ms), or '' for never
ARGV[16] evict    '1': a full owner names its least recently used memory rather than refuse
ARGV[17..] one posting per term key, in order: length * 1000 + the term's frequency

Returns {id, 1, expired} for a new memory, {id, 0, expired} for a merge, `expired` the
owner's memories whose time to live has run out, for the caller to remove; or, having written
nothing, {id, 2} when the memory id with this text is being forgotten, {id, 3} when the owner
is full and id is its least recently used memory (evict), {LIMIT, -1, reason} when the owner
is full or the merged memory would pass a limit, and {CORRUPT, -1, reason} when a key, a stats
field, the dedup entry, the note or the record merged into is not what the memory writes,
and {MISMATCH, -1, reason} when the owner's vectors were made by another embedder.
]]
--- @include "memory_types"
--- @include "memory_counts"
--- @include "memory_vectors"
--- @include "memory_vector_put"

-- Why `record`, decoded from `raw`, is not a memory's record (see the header), or nil.
local function record_problem(record, raw)
  if type(record) ~= 'table' or string.sub(raw, 1, 1) ~= '{' then return 'not a JSON object' end
  if type(record.t) ~= 'string' then return 'no text' end
  for _, field in ipairs({'c', 'g', 'k'}) do
    if type(record[field]) ~= 'table' then return field .. ' is not a list' end
    for k, v in pairs(record[field]) do
      if type(k) ~= 'number' or type(v) ~= 'string' then return field .. ' is not a list of strings' end
    end
  end
  if record.x ~= nil then
    if type(record.x) ~= 'table' then return 'x is not a list' end
    for k, v in pairs(record.x) do
      if type(k) ~= 'number' or type(v) ~= 'string' then return 'x is not a list of strings' end
    end
  end
  if type(record.m) ~= 'table' then return 'm is not an object' end
  for k, v in pairs(record.m) do
    if type(k) ~= 'string' or type(v) ~= 'string' then return 'm is not an object of JSON texts' end
  end
  for _, field in ipairs({'at', 'up', 'ex'}) do
    if (field ~= 'ex' or record.ex ~= nil)
        and (type(record[field]) ~= 'string' or not string.find(record[field], '^%d+$')) then
      return field .. ' is not a time'
    end
  end
  if type(record.n) ~= 'number' or record.n < 0 or record.n % 1 ~= 0 then return 'n is not a length' end
end

local stats, docs, dedup, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hash, now, length = ARGV[1], ARGV[2], tonumber(ARGV[4])
local vset, vhash, emb, vector = KEYS[5], KEYS[6], ARGV[11], ARGV[12]
local used, expires, expiry = KEYS[7], KEYS[8], ARGV[15]
local sets = 9 + tonumber(ARGV[5]) + tonumber(ARGV[6])
local MAX_MESSAGE_IDS = 64  -- redis_history.memory.redis_memory's (a test keeps them equal)
local most = {memories = tonumber(ARGV[7]), g = tonumber(ARGV[8]), c = tonumber(ARGV[9]),
  m = tonumber(ARGV[10]), x = MAX_MESSAGE_IDS}
local note = '+' .. hash

local bad = check_types(1, 3, 'hash') or check_types(4, 4, 'zset')
  or check_types(5, 5, 'vectorset') or check_types(6, 6, 'hash') or check_types(7, 9, 'zset')
  or check_types(10, sets, 'set')
  or check_types(sets + 1, #KEYS, 'hash')
if bad then return bad end
local counts, bad = read_counts(stats, 'seq', 'docs', 'len')
if bad then return bad end
local mode
if emb ~= '' then
  bad = other_embedder(stats, emb)
  if bad then return bad end
  mode, bad = vector_mode(vset)
  if not mode then return bad end
end

-- the memory's vector, and the embedder that made it
local function keep_vector(id)
  if emb == '' then return end
  put_vector(mode, stats, vset, vhash, id, vector, emb)
end

-- the memory's place in `used` and `expires`
local function keep_times(id)
  redis.call('ZADD', used, now, id)
  if expiry == '' then redis.call('ZREM', expires, id) else redis.call('ZADD', expires, expiry, id) end
end

-- the reply to a store of memory id: new or merged, and how many memories have expired
local function stored(id, new)
  return {id, new, redis.call('ZCOUNT', expires, '-inf', now)}
end

-- the owner's memory with this text being forgotten, or with it, or the id of an unfinished
-- store of it
local id, where = redis.call('HGET', stats, '-' .. hash), stats
local forgetting = id
if not id then id, where = redis.call('HGET', dedup, hash), dedup end
if not id then id, where = redis.call('HGET', stats, note), stats end
if id and not string.find(id, '^%d+$') then
  return {CORRUPT, -1, 'the memory id of ' .. hash .. ' in ' .. where .. ' is not a memory id: ' .. id}
end
if forgetting then return {id, 2} end
local restated = false
if not id and ARGV[14] ~= '' and redis.call('ZSCORE', recent, ARGV[14]) then
  id, restated = ARGV[14], true
end
local old = id and redis.call('HGET', docs, id)
if old then
  local ok, record = pcall(cjson.decode, old)
  local problem = 'not JSON'
  if ok then problem = record_problem(record, old) end
  if problem then return {CORRUPT, -1, 'memory ' .. id .. ' in ' .. docs .. ' is not a record: ' .. problem} end
  local new = cjson.decode(ARGV[3])
  for _, field in ipairs({'c', 'g'}) do
    local have, list = {}, record[field]
    for _, v in ipairs(list) do have[v] = true end
    for _, v in ipairs(new[field]) do
      if not have[v] then list[#list + 1] = v; have[v] = true end
    end
  end
  for k, v in pairs(new.m) do record.m[k] = v end  -- each value is its JSON text, copied
  record.ex = new.ex
  if new.x and next(new.x) then  -- the messages it came from: the first MAX_MESSAGE_IDS kept
    local have, list = {}, record.x or {}
    for _, v in ipairs(list) do have[v] = true end
    for _, v in ipairs(new.x) do
      if not have[v] and #list < most.x then list[#list + 1] = v; have[v] = true end
    end
    record.x = list
  end
  local names = {c = 'conversations', g = 'tags'}
  for field, name in pairs(names) do
    if #record[field] > most[field] then
      return {LIMIT, -1, 'memory ' .. id .. ' would have ' .. #record[field] .. ' ' .. name
        .. '; the limit is ' .. most[field]}
    end
  end
  local size = 0
  for k, v in pairs(record.m) do size = size + #k + #v end
  if size > most.m then
    return {LIMIT, -1, 'memory ' .. id .. ' would have ' .. size
      .. ' bytes of extra metadata; the limit is ' .. most.m}
  end
  record.up = now
  for i = 10, sets do redis.call('SADD', KEYS[i], id) end
  if not restated then keep_vector(id) end  -- a restated memory keeps its text and vector
  redis.call('HSET', docs, id, cjson.encode(record))
  keep_times(id)
  redis.call('ZADD', recent, now, id)
  redis.call('HDEL', stats, note)
  return stored(id, 0)
end

if not id then
  if counts[2] >= most.memories and ARGV[16] == '1' then
    local oldest = redis.call('ZRANGE', used, 0, 0)[1] or redis.call('ZRANGE', recent, 0, 0)[1]
    if oldest then return {oldest, 3} end
  end
  if counts[2] >= most.memories then
    return {LIMIT, -1, stats .. ': the owner has ' .. counts[2] .. ' memories; the limit is '
      .. most.memories}
  end
  id = string.format('%d', counts[1] + 1)
  local fields = {'seq', id, 'docs', string.format('%d', counts[2] + 1),
    'len', string.format('%d', counts[3] + length), note, id}
  if counts[2] == 0 then fields[#fields + 1], fields[#fields + 2] = 'terms', ARGV[13] end
  redis.call('HSET', stats, unpack(fields))
end
redis.call('HSET', dedup, hash, id)
for i = 10, sets do redis.call('SADD', KEYS[i], id) end
for i = sets + 1, #KEYS do redis.call('HSET', KEYS[i], id, ARGV[i - sets + 16]) end
keep_vector(id)
redis.call('HSET', docs, id, ARGV[3])
keep_times(id)
redis.call('ZADD', recent, now, id)
redis.call('HDEL', stats, note)
return stored(id, 1)
