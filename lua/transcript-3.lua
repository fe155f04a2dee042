--[[
transcript: the full record, archived originals then the live list, read at one
instant, whole or a page at a time. Positions count every entry ever archived
(`adropped` of them capped away), so a message keeps its position when a
compaction moves it from the live list to the archive.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (adropped)
KEYS[3] archive  LIST of replaced envelopes, oldest first
ARGV[1] from     the position to start at (>= 0)
ARGV[2] count    how many entries at most, or 0 for all

Returns {first, next, envelopes...}: the position actually read from (later
than `from` when capped entries were asked for), the position after the last
entry returned, then the entries; next is -1 when nothing is left after them.
]]

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local from, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local capped = tonumber(redis.call('HGET', meta, 'adropped') or 0) or 0
local archived, live = redis.call('LLEN', archive), redis.call('LLEN', msgs)
local first = math.max(from, capped)
local last = capped + archived + live - 1  -- the last position there is
if count > 0 then last = math.min(last, first + count - 1) end

local out = {first, last + 1 < capped + archived + live and last + 1 or -1}
local function take(key, start, stop)
  if start > stop then return end
  for _, envelope in ipairs(redis.call('LRANGE', key, start, stop)) do out[#out + 1] = envelope end
end
take(archive, first - capped, math.min(last, capped + archived - 1) - capped)
take(msgs, math.max(first - capped - archived, 0), last - capped - archived)
return out
