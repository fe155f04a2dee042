--[[
memory_reterm: index memories again by the terms the caller made of them (memory_unindexed
returned them), each only if its record is still the one read (a memory merged or forgotten
meanwhile is left to the next pass). For each memory: its old postings are removed, the new
ones written, then its record (which names the new terms, their count and the scheme) and
the owner's total length. A call stopped part way leaves the memory it was at with its record
as it was, so the next pass indexes it again from the start (the total length, a statistic
of the ranking, may then be off by that memory's change).

KEYS[1] stats    HASH  len (the terms of all memories)
KEYS[2] docs     HASH  id -> record (JSON)
then, per memory, its old terms' postings HASHes and its new terms' (ARGV says how many)
ARGV[1..] per memory: its id, the record read, the new record, its old length, its new
         length, its old terms' count, its new terms' count, then one posting per new term
         (length * 1000 + the term's frequency)

Returns how many memories it indexed again; or {CORRUPT, -1, reason} when a key or the
length count is not what the memory writes, having written nothing.
]]
--- @include "memory_types"
--- @include "memory_counts"
local stats, docs = KEYS[1], KEYS[2]
local bad = check_types(1, #KEYS, 'hash')
if bad then return bad end
local counts, bad = read_counts(stats, 'len')
if bad then return bad end
local total, done, i, k = counts[1], 0, 1, 3
while i <= #ARGV do
  local id, nold, nnew = ARGV[i], tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  if redis.call('HGET', docs, id) == ARGV[i + 1] then
    for j = k, k + nold - 1 do redis.call('HDEL', KEYS[j], id) end
    for j = 1, nnew do redis.call('HSET', KEYS[k + nold + j - 1], id, ARGV[i + 6 + j]) end
    redis.call('HSET', docs, id, ARGV[i + 2])
    total = math.max(total - tonumber(ARGV[i + 3]) + tonumber(ARGV[i + 4]), 0)
    redis.call('HSET', stats, 'len', string.format('%d', total))
    done = done + 1
  end
  k = k + nold + nnew
  i = i + 7 + nnew
end
return done
