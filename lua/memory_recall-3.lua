--[[
memory_recall: an owner's top_k memories by BM25 (k1 = 1.2, b = 0.75) over the query's terms,
the most recently stored first on equal scores. Only the keys given are read, all of one
owner; the conversation and tag sets given are intersected here, so a memory outside them is
never scored. Terms are read rarest first; once the k-th best score is above what the terms
left could add, those terms are looked up only for the memories that can still reach the top
(MaxScore pruning: the same result, without reading a frequent term's whole postings).

KEYS[1] stats    HASH  docs, len (for the mean length)
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] recent   ZSET  id -> last stored (ms)
then nf filter sets (a conversation, tags), then one postings HASH per distinct query term
(id -> length * 1000 + the term's frequency)
ARGV[1] top_k    the most memories returned (> 0)
ARGV[2] nf       filter sets given

Returns {id, score, record, ...}, best first; the score as text. Or {CORRUPT, -1, reason}
when a key, a stats field or a posting is not what the memory writes.
]]
--- @include "memory_types"
--- @include "memory_counts"

-- A posting's value (length * 1000 + the term's frequency) as a number, or nil if it is not one.
local function posting(v)
  v = tonumber(v)
  if v and v >= 0 and v < 1e12 and v % 1 == 0 then return v end
end

-- {CORRUPT, -1, reason} for a posting that is not a number.
local function bad_posting(key, id, v)
  return {CORRUPT, -1, 'the posting of memory ' .. id .. ' in ' .. key .. ' is not a number: ' .. tostring(v)}
end

local stats, docs, recent = KEYS[1], KEYS[2], KEYS[3]
local top, nf = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = check_types(1, 2, 'hash') or check_types(3, 3, 'zset') or check_types(4, 3 + nf, 'set')
  or check_types(4 + nf, #KEYS, 'hash')
if bad then return bad end
local counts, bad = read_counts(stats, 'docs', 'len')
if bad then return bad end
local n = counts[1]
if n <= 0 then return {} end
local avg = counts[2] / n
if avg <= 0 then avg = 1 end

local allowed, passed, nallowed
if nf > 0 then
  passed = redis.call('SINTER', unpack(KEYS, 4, 3 + nf))
  nallowed = #passed
  if nallowed == 0 then return {} end
  allowed = {}
  for i = 1, nallowed do allowed[passed[i]] = true end
end

local scores = {}
local a, c = 1.2 * 0.25, 1.2 * 0.75 / avg

-- the k-th best score so far (and how many there are, if fewer than k)
local function kth()
  local best, m = {}, 0
  for _, s in pairs(scores) do
    if m < top then
      m = m + 1
      local j = m
      while j > 1 and best[j - 1] > s do best[j] = best[j - 1]; j = j - 1 end
      best[j] = s
    elseif s > best[1] then
      local j = 1
      while j < m and best[j + 1] < s do best[j] = best[j + 1]; j = j + 1 end
      best[j] = s
    end
  end
  return best[1], m
end

-- add a term's weight to the memories of ids that carry it (looked up 1000 at a time); or
-- {CORRUPT, -1, reason} for a posting that is not a number
local function lookup(key, ids, w)
  for j = 1, #ids, 1000 do
    local last = math.min(j + 999, #ids)
    local got = redis.call('HMGET', key, unpack(ids, j, last))
    for g = 1, #got do
      if got[g] then
        local id = ids[j + g - 1]
        local v = posting(got[g])
        if not v then return bad_posting(key, id, got[g]) end
        local tf = v % 1000
        scores[id] = (scores[id] or 0) + w * tf / (tf + a + c * (v - tf) / 1000)
      end
    end
  end
end

-- rarest terms first; a term adds at most its weight w to a memory's score
local query = {}
for i = 4 + nf, #KEYS do
  local df = redis.call('HLEN', KEYS[i])
  if df > 0 then
    query[#query + 1] = {KEYS[i], df, math.log(1 + (n - df + 0.5) / (df + 0.5)) * 2.2}
  end
end
table.sort(query, function(x, y) return x[2] < y[2] end)
local rest = {}
local bound = 0
for i = #query, 1, -1 do bound = bound + query[i][3]; rest[i] = bound end

local found = 0
for i, term in ipairs(query) do
  local key, df, w = term[1], term[2], term[3]
  local live
  if found >= top then
    -- a memory not scored yet, or scoring below the k-th best by more than what the terms
    -- left can add, cannot reach the top: look up only those that can (exact, MaxScore)
    local floor = kth()
    if floor > rest[i] then
      live = {}
      for id, s in pairs(scores) do
        if s + rest[i] >= floor then live[#live + 1] = id end
      end
    end
  end
  if live then
    bad = lookup(key, live, w)
  elseif allowed and nallowed < df then
    bad = lookup(key, passed, w)  -- fewer memories pass the filters than carry the term
  else
    local p = redis.call('HGETALL', key)
    for j = 1, #p, 2 do
      local id = p[j]
      if not allowed or allowed[id] then
        local v = posting(p[j + 1])
        if not v then return bad_posting(key, id, p[j + 1]) end
        local tf = v % 1000
        scores[id] = (scores[id] or 0) + w * tf / (tf + a + c * (v - tf) / 1000)
      end
    end
  end
  if bad then return bad end
  if not live then  -- new memories may have been scored
    found = 0
    for _ in pairs(scores) do found = found + 1 end
  end
end

-- every memory scoring at least the k-th best, in order; an id not in `recent` is the
-- postings of a store stopped part way (see memory_store), dropped and the k-th best found again
local group, up
repeat
  local floor, m = kth()
  if m == 0 then return {} end
  local dropped = false
  group, up = {}, {}
  for id, s in pairs(scores) do
    if s >= floor then
      local stored = redis.call('ZSCORE', recent, id)
      if stored then
        group[#group + 1] = id
        up[id] = tonumber(stored)
      else
        scores[id], dropped = nil, true
      end
    end
  end
until not dropped
table.sort(group, function(x, y)
  local sx, sy = scores[x], scores[y]
  if sx ~= sy then return sx > sy end
  if up[x] ~= up[y] then return up[x] > up[y] end
  return tonumber(x) > tonumber(y)
end)
local chosen = {}
for i = 1, math.min(top, #group) do chosen[i] = group[i] end
local records = redis.call('HMGET', docs, unpack(chosen))
local out = {}
for i = 1, #chosen do
  out[#out + 1] = chosen[i]
  out[#out + 1] = string.format('%.17g', scores[chosen[i]])
  out[#out + 1] = records[i] or ''
end
return out
