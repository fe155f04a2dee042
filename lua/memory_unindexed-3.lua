--[[
memory_unindexed: up to `limit` of an owner's memories whose terms were made otherwise than by
`scheme` (stored before it: their record has no "s" naming it), newest first, with their
records, for the caller to index again (memory_reterm). When there are none, the stats hash
records `scheme` under "terms" in this same call: from then on every memory of the owner is
indexed by it, and memory_recall reads the owner's postings.

A record names its scheme as `"s":"<scheme>"`; in a record's JSON a quote that opens a value
is preceded by a key, never by a backslash, so the text and metadata (escaped strings) cannot
hold that pattern, and a plain find tells the records apart without decoding them.

KEYS[1] stats    HASH  terms (the scheme of every memory's terms, once they all have it)
KEYS[2] docs     HASH  id -> record (JSON)
KEYS[3] recent   ZSET  id -> last stored (ms)
ARGV[1] scheme   how the caller makes terms (redis_history.memory.redis_memory.TERMS)
ARGV[2] limit    the most memories returned
ARGV[3] bytes    the most bytes of records returned (one record at least)

Returns {id, record, ...}, or {} having recorded the scheme; or {CORRUPT, -1, reason} when a
key is not what the memory writes.
]]
--- @include "memory_types"
local stats, docs, recent = KEYS[1], KEYS[2], KEYS[3]
local scheme, limit, most = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local bad = check_types(1, 2, 'hash') or check_types(3, 3, 'zset')
if bad then return bad end
local mark, out, size = '"s":"' .. scheme .. '"', {}, 0
for _, id in ipairs(redis.call('ZREVRANGE', recent, 0, -1)) do
  local record = redis.call('HGET', docs, id)
  if record and not string.find(record, mark, 1, true) then
    out[#out + 1] = id
    out[#out + 1] = record
    size = size + #record
    if #out >= 2 * limit or size >= most then break end
  end
end
if #out == 0 then redis.call('HSET', stats, 'terms', scheme) end
return out
