--[[
memory_recall: an owner's top_k memories by BM25 (k1 = 1.2, b = 0.75) over the query's terms,
the most recently stored first on equal scores. Only the keys given are read, all of one
owner; the conversation and tag sets given are intersected here, so a memory outside them is
never scored. Terms are read rarest first; once the k-th best score is above what the terms
left could add, those terms are looked up only for the memories that can still reach the top
(MaxScore pruning: the same result, without reading a frequent term's whole postings).

The work is bounded, so that no recall runs long whatever the owner holds: each posting read
or looked up and each score a pass goes over counts one, and a term whose turn would take the
count past `budget` is left out, with every term after it (they are the most frequent, so
weigh least). Within the budget, which the usual query stays far below, the scores are exact.

KEYS[1] stats    HASH  docs, len (for the mean length)
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] recent   ZSET  id -> last stored (ms)
KEYS[4] expires  ZSET  id -> when it expires (ms): an expired memory is not recalled
then nf filter sets (a conversation, tags), then one postings HASH per distinct query term
(id -> length * 1000 + the term's frequency)
ARGV[1] top_k    the most memories returned (> 0)
ARGV[2] nf       filter sets given
ARGV[3] budget   the most postings and scores a recall goes over
ARGV[4] scheme   how the query's terms were made (memory_unindexed)
ARGV[5] now      ms

Returns {id, score, record, ...}, best first, equal scores newest first as `recent` orders
them; the score as text. Or {UNINDEXED, -1, reason} when some of the owner's memories may
have been indexed by other terms than the query's (the stats hash does not name its scheme
under "terms"), for the caller to index them again first (memory_unindexed), and
{CORRUPT, -1, reason} when a key, a stats field or a posting is not what the memory writes,
or the stats hash names another scheme.
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

local stats, docs, recent, expires = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local top, nf, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local bad = check_types(1, 2, 'hash') or check_types(3, 4, 'zset') or check_types(5, 4 + nf, 'set')
  or check_types(5 + nf, #KEYS, 'hash')
if bad then return bad end
local counts, bad = read_counts(stats, 'docs', 'len')
if bad then return bad end
local n = counts[1]
if n <= 0 then return {} end
local scheme = redis.call('HGET', stats, 'terms')
if not scheme then
  return {UNINDEXED, -1, stats .. ': memories stored before ' .. ARGV[4] .. ' terms are not indexed again yet'}
elseif scheme ~= ARGV[4] then
  return {CORRUPT, -1, stats .. ': the memories are indexed by ' .. scheme .. ' terms, not '
    .. ARGV[4] .. ' as this version makes them'}
end
local avg = counts[2] / n
if avg <= 0 then avg = 1 end

local allowed, passed, nallowed
if nf > 0 then
  passed = redis.call('SINTER', unpack(KEYS, 5, 4 + nf))
  nallowed = #passed
  if nallowed == 0 then return {} end
  allowed = {}
  for i = 1, nallowed do allowed[passed[i]] = true end
end

local scores, scored, spent = {}, 0, 0
local a, c = 1.2 * 0.25, 1.2 * 0.75 / avg

-- add w * (the term's saturated frequency) to the score of memory id
local function add(id, v, w)
  local tf = v % 1000
  local s = scores[id]
  if not s then s, scored = 0, scored + 1 end
  scores[id] = s + w * tf / (tf + a + c * (v - tf) / 1000)
end

-- the k-th best score so far (and how many there are, if fewer than k)
local function kth()
  spent = spent + scored
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
  spent = spent + #ids
  for j = 1, #ids, 1000 do
    local got = redis.call('HMGET', key, unpack(ids, j, math.min(j + 999, #ids)))
    for g = 1, #got do
      if got[g] then
        local v = posting(got[g])
        if not v then return bad_posting(key, ids[j + g - 1], got[g]) end
        add(ids[j + g - 1], v, w)
      end
    end
  end
end

-- rarest terms first; a term adds at most its weight w to a memory's score
local query = {}
for i = 5 + nf, #KEYS do
  local df = redis.call('HLEN', KEYS[i])
  if df > 0 then
    query[#query + 1] = {KEYS[i], df, math.log(1 + (n - df + 0.5) / (df + 0.5)) * 2.2}
  end
end
table.sort(query, function(x, y) return x[2] < y[2] end)
local rest = {}
local bound = 0
for i = #query, 1, -1 do bound = bound + query[i][3]; rest[i] = bound end

for i, term in ipairs(query) do
  local key, df, w = term[1], term[2], term[3]
  local live
  if scored >= top then
    -- a memory not scored yet, or scoring below the k-th best by more than what the terms
    -- left can add, cannot reach the top: look up only those that can (exact, MaxScore)
    local floor = kth()
    if floor > rest[i] then
      spent = spent + scored
      live = {}
      for id, s in pairs(scores) do
        if s + rest[i] >= floor then live[#live + 1] = id end
      end
    end
  end
  local ids = live or (allowed and nallowed < df and passed)  -- fewer ids than carry the term
  if spent + (ids and #ids or df) > budget then break end
  if ids then
    bad = lookup(key, ids, w)
    if bad then return bad end
  else
    spent = spent + df
    local p = redis.call('HGETALL', key)
    for j = 1, #p, 2 do
      local id = p[j]
      if not allowed or allowed[id] then
        local v = posting(p[j + 1])
        if not v then return bad_posting(key, id, p[j + 1]) end
        add(id, v, w)
      end
    end
  end
end

-- the memories scoring above the k-th best (fewer than k), then the newest of those scoring
-- it: sorted by their times when few, else found by walking `recent` from its newest. An id
-- not in `recent` is the postings of a store stopped part way (see memory_store), one in
-- `expires` before now has expired: it is dropped and the k-th best found again.
local group, up
local timed = redis.call('EXISTS', expires) == 1
while true do
  local floor, m = kth()
  if m == 0 then return {} end
  local tied, ntied = {}, 0
  group, up = {}, {}
  for id, s in pairs(scores) do
    if s > floor then
      group[#group + 1] = id
    elseif s == floor then
      tied[id], ntied = true, ntied + 1
    end
  end
  local want = top - #group
  if ntied <= want or ntied <= 1000 then  -- few enough to sort
    for id in pairs(tied) do group[#group + 1] = id end
  else
    local start = 0
    while want > 0 do
      local page = redis.call('ZREVRANGE', recent, start, start + 999)
      if #page == 0 then break end
      for _, id in ipairs(page) do
        if tied[id] and want > 0 then group[#group + 1], tied[id], want = id, nil, want - 1 end
      end
      start = start + 1000
    end
    if want > 0 then  -- the tied ids left are not in `recent`
      for id in pairs(tied) do scores[id] = nil; scored = scored - 1 end
      group = nil
    end
  end
  if group then
    local dropped = false
    for _, id in ipairs(group) do
      local stored = redis.call('ZSCORE', recent, id)
      local ends = stored and timed and redis.call('ZSCORE', expires, id)
      if ends and tonumber(ends) <= tonumber(ARGV[5]) then stored = false end
      if stored then
        up[id] = tonumber(stored)
      else
        scores[id], scored, dropped = nil, scored - 1, true
      end
    end
    if not dropped then break end
  end
end
table.sort(group, function(x, y)
  local sx, sy = scores[x], scores[y]
  if sx ~= sy then return sx > sy end
  if up[x] ~= up[y] then return up[x] > up[y] end
  return x > y  -- as `recent` orders equal times
end)
for i = top + 1, #group do group[i] = nil end
local records = redis.call('HMGET', docs, unpack(group))
local out = {}
for i = 1, #group do
  out[#out + 1] = group[i]
  out[#out + 1] = string.format('%.17g', scores[group[i]])
  out[#out + 1] = records[i] or ''
end
return out
