--[[
transcript: the full record, archived originals then the live list, read at one
instant, a page at a time. Positions count every entry ever archived (`adropped`
of them capped away), so a message keeps its position when a compaction moves it
from the live list to the archive. A page ends early once it holds MAX_READ_BYTES
of stored envelopes (the client ends it sooner, by the text they decompress to).

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (adropped)
KEYS[3] archive  LIST of replaced envelopes, oldest first
ARGV[1] from     the position to start at (>= 0)
ARGV[2] count    how many entries at most (> 0)

Returns {first, next, envelopes...}: the position actually read from (later
than `from` when capped entries were asked for), the position after the last
entry returned, then the entries; next is -1 when nothing is left after them.
]]
--- @include "limits"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local from, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local capped = tonumber(redis.call('HGET', meta, 'adropped') or 0) or 0
local archived, live = redis.call('LLEN', archive), redis.call('LLEN', msgs)
local first = math.max(from, capped)
local last = math.min(capped + archived + live - 1, first + count - 1)  -- the last position asked

local out, bytes, position = {first, -1}, 0, first
-- Entries of `key` from `start` to `stop` while the page has room; false once it is full.
local function take(key, start, stop)
  if start > stop then return true end
  local i = start
  while i <= stop do
    local j = math.min(stop, i + math.max(1, math.floor((MAX_READ_BYTES - bytes) / MAX_ENTRY_BYTES)) - 1)
    for _, envelope in ipairs(redis.call('LRANGE', key, i, j)) do
      out[#out + 1] = envelope
      bytes, position = bytes + #envelope, position + 1
    end
    i = j + 1
    if bytes >= MAX_READ_BYTES then return false end
  end
  return true
end
if take(archive, first - capped, math.min(last, capped + archived - 1) - capped) then
  take(msgs, math.max(first - capped - archived, 0), last - capped - archived)
end
if position < capped + archived + live then out[2] = position end
return out
