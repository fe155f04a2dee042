--[[
memory_vsearch: an owner's n memories nearest a query vector, by cosine, exactly: a linear
scan of at most MAX_MEMORIES vectors (VSIM ... TRUTH where the server has vector sets, a scan
of the vectors' hash in this script where it has not), so both give the same ranking. Scores
are (1 + cosine) / 2, rounded to 6 decimals; equal scores go to the newest memory (the higher
id). Only memories in `recent` (stored whole, not being forgotten) and in every filter set
given are returned.

KEYS[1] stats    HASH  docs (memories), emb (the embedder of the vectors)
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] recent   ZSET  id -> last stored (ms)
KEYS[4] vset     VECTORSET  id -> vector
KEYS[5] vhash    HASH  id -> vector (float32)
KEYS[6] expires  ZSET  id -> when it expires (ms): an expired memory is not returned
then nf filter sets (a conversation, tags)
ARGV[1] emb      the embedder ("<name>/<dimensions>")
ARGV[2] query    the query's vector, little-endian float32, normalized
ARGV[3] dim      its dimensions
ARGV[4] n        the most memories returned (> 0)
ARGV[5] nf       filter sets given
ARGV[6] cursor   where this call's scan of the vectors' hash starts ('0': at the start)
ARGV[7] budget   the most vectors one call reads from the hash
ARGV[8] now      ms

Where the server has no vector sets the hash is read a part per call, by HSCAN from
`cursor`, `budget` vectors at most (so no call runs long however long the vectors are); the
caller calls again from the cursor returned until it is '0', and keeps the n nearest of all
the parts (HSCAN returns every vector held throughout at least once).

Returns {missing, cursor, id, score, record, ...}, nearest first, `missing` (text) the
owner's memories that have no vector yet, `cursor` where the next part starts ('0': none),
each record '' unless this call read every vector (then the n are the owner's nearest); or {MISMATCH, -1, reason} when the owner's vectors were made
by another embedder, {CORRUPT, -1, reason} when a key, a count or a vector is not what the
memory writes.
]]
--- @include "memory_types"
--- @include "memory_counts"
--- @include "memory_vectors"
local stats, docs, recent, vset, vhash, expires = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local emb, dim, n, nf = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local bad = check_types(1, 2, 'hash') or check_types(3, 3, 'zset')
  or check_types(4, 4, 'vectorset') or check_types(5, 5, 'hash') or check_types(6, 6, 'zset')
  or check_types(7, 6 + nf, 'set')
if bad then return bad end
local counts, bad = read_counts(stats, 'docs')
if bad then return bad end
bad = other_embedder(stats, emb)
if bad then return bad end
local mode, refused = vector_mode(vset)
if not mode then return refused end
local held
if mode == 'set' then held = redis.call('VCARD', vset) else held = redis.call('HLEN', vhash) end
local out = {string.format('%d', math.max(counts[1] - held, 0)), '0'}
if held == 0 then return out end
local whole_scan = true

local allowed
if nf > 0 then
  local ids = redis.call('SINTER', unpack(KEYS, 7, 6 + nf))
  allowed = {}
  for _, id in ipairs(ids) do allowed[id] = true end
end
-- whether memory id passes the filters, is in `recent` (stored whole, not being forgotten)
-- and has not expired; looked up only for the ids that would rank
local now, timed = tonumber(ARGV[8]), redis.call('EXISTS', expires) == 1
local function wanted(id)
  if allowed and not allowed[id] then return false end
  if redis.call('ZSCORE', recent, id) == false then return false end
  local ends = timed and redis.call('ZSCORE', expires, id)
  return not ends or tonumber(ends) > now
end
local function rounded(score) return math.floor(score * 1e6 + 0.5) / 1e6 end

local found = {}
-- Whether candidate `a` ({id, score, numeric id}) goes before `b`: nearer, or as near and newer.
local function before(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  return a[3] > b[3]
end

-- Sort `found` in that order.
local function rank(found) table.sort(found, before) end

-- Put `candidate` in its place in `top`, kept in that order and at most `n` long.
local function keep(top, n, candidate)
  if #top == n and not before(candidate, top[n]) then return end
  local i = math.min(#top, n - 1)
  while i >= 1 and before(candidate, top[i]) do
    top[i + 1] = top[i]
    i = i - 1
  end
  top[i + 1] = candidate
end
if mode == 'set' then
  -- the nearest 4n + 16, or, unless they hold n wanted memories the n-th of which is nearer
  -- than the farthest read (so none of equal rounded score is left unread), all of them
  local count = math.min(held, 4 * n + 16)
  while true do
    found = {}
    local reply = redis.call('VSIM', vset, 'FP32', ARGV[2], 'WITHSCORES', 'COUNT', count, 'TRUTH')
    for i = 1, #reply, 2 do
      local id = reply[i]
      if wanted(id) then found[#found + 1] = {id, rounded(tonumber(reply[i + 1])), tonumber(id)} end
    end
    rank(found)
    local farthest = rounded(tonumber(reply[#reply]) or 0)
    if count >= held or (#found >= n and found[n][2] > farthest) then break end
    count = held
  end
else
  -- the dot product read 16 numbers at a time, straight from the bytes (no table a vector):
  -- this loop is the scan's cost
  local top, unpack4 = {}, struct.unpack
  local q = {unpack4('<' .. string.rep('f', dim), ARGV[2])}
  local f16, whole = '<' .. string.rep('f', 16), dim - dim % 16
  local cursor, budget, read, seen = ARGV[6], tonumber(ARGV[7]), 0, {}
  repeat
    local page = redis.call('HSCAN', vhash, cursor, 'COUNT', 100)
    cursor = page[1]
    local all = page[2]
    for i = 1, #all, 2 do
      local id, blob = all[i], all[i + 1]
      if #blob ~= 4 * dim then
        return {CORRUPT, -1, 'the vector of memory ' .. id .. ' in ' .. vhash .. ' has ' .. #blob
          .. ' bytes, not ' .. 4 * dim}
      end
      local dot, pos = 0, 1
      for j = 1, whole, 16 do
        local a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, nxt =
          unpack4(f16, blob, pos)
        dot = dot + q[j] * a1 + q[j + 1] * a2 + q[j + 2] * a3 + q[j + 3] * a4 + q[j + 4] * a5
          + q[j + 5] * a6 + q[j + 6] * a7 + q[j + 7] * a8 + q[j + 8] * a9 + q[j + 9] * a10
          + q[j + 10] * a11 + q[j + 11] * a12 + q[j + 12] * a13 + q[j + 13] * a14
          + q[j + 14] * a15 + q[j + 15] * a16
        pos = nxt
      end
      for j = whole + 1, dim do
        local a, nxt = unpack4('<f', blob, pos)
        dot, pos = dot + q[j] * a, nxt
      end
      local score, last = rounded((1 + dot) / 2), top[n]
      if (not last or score > last[2] or (score == last[2] and tonumber(id) > last[3]))
          and not seen[id] and wanted(id) then
        seen[id] = true  -- HSCAN may return a vector twice
        keep(top, n, {id, score, tonumber(id)})
      end
    end
    read = read + #all / 2
  until cursor == '0' or read >= budget
  out[2] = cursor
  whole_scan = ARGV[6] == '0' and cursor == '0'
  found = top
end
for i = 1, math.min(n, #found) do
  local id = found[i][1]
  local record = ''
  if whole_scan then record = redis.call('HGET', docs, id) end
  if record then
    out[#out + 1] = id
    out[#out + 1] = string.format('%.6f', found[i][2])
    out[#out + 1] = record
  end
end
return out
