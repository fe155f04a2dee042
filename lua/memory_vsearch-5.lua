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
then nf filter sets (a conversation, tags)
ARGV[1] emb      the embedder ("<name>/<dimensions>")
ARGV[2] query    the query's vector, little-endian float32, normalized
ARGV[3] dim      its dimensions
ARGV[4] n        the most memories returned (> 0)
ARGV[5] nf       filter sets given

Returns {missing, id, score, record, ...}, nearest first, `missing` (text) the owner's
memories that have no vector yet; or {MISMATCH, -1, reason} when the owner's vectors were made
by another embedder, {CORRUPT, -1, reason} when a key, a count or a vector is not what the
memory writes.
]]
--- @include "memory_types"
--- @include "memory_counts"
--- @include "memory_vectors"
local stats, docs, recent, vset, vhash = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local emb, dim, n, nf = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local bad = check_types(1, 2, 'hash') or check_types(3, 3, 'zset')
  or check_types(4, 4, 'vectorset') or check_types(5, 5, 'hash') or check_types(6, 5 + nf, 'set')
if bad then return bad end
local counts, bad = read_counts(stats, 'docs')
if bad then return bad end
bad = other_embedder(stats, emb)
if bad then return bad end
local mode, refused = vector_mode(vset)
if not mode then return refused end
local held
if mode == 'set' then held = redis.call('VCARD', vset) else held = redis.call('HLEN', vhash) end
local out = {string.format('%d', math.max(counts[1] - held, 0))}
if held == 0 then return out end

local allowed
if nf > 0 then
  local ids = redis.call('SINTER', unpack(KEYS, 6, 5 + nf))
  allowed = {}
  for _, id in ipairs(ids) do allowed[id] = true end
end
local stored = {}  -- the ids in `recent`: read once, not a ZSCORE a vector
for _, id in ipairs(redis.call('ZREVRANGE', recent, 0, -1)) do stored[id] = true end
local function wanted(id)
  return (not allowed or allowed[id]) and stored[id]
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
  local top = {}
  local format = '<' .. string.rep('f', dim)
  local query = {struct.unpack(format, ARGV[2])}
  local all = redis.call('HGETALL', vhash)
  for i = 1, #all, 2 do
    local id, blob = all[i], all[i + 1]
    if #blob ~= 4 * dim then
      return {CORRUPT, -1, 'the vector of memory ' .. id .. ' in ' .. vhash .. ' has ' .. #blob
        .. ' bytes, not ' .. 4 * dim}
    end
    if wanted(id) then
      local v, dot = {struct.unpack(format, blob)}, 0
      for j = 1, dim do dot = dot + query[j] * v[j] end
      keep(top, n, {id, rounded((1 + dot) / 2), tonumber(id)})
    end
  end
  found = top
end
for i = 1, math.min(n, #found) do
  local id = found[i][1]
  local record = redis.call('HGET', docs, id)
  if record then
    out[#out + 1] = id
    out[#out + 1] = string.format('%.6f', found[i][2])
    out[#out + 1] = record
  end
end
return out
