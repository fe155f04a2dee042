--[[
read_prefix: a fork's read of the conversation it copies, a chunk at a time: the
live list from a position up to and including a given message, or the archive.
Every read after the first is fenced on what the first saw: the version (which
every rewrite bumps), and the live entry last read still at its position, byte
for byte.
Appends only add after what was read, so the chunks of reads that pass the fence
are one version of the conversation; a read that does not pass writes nothing
and refuses, and the fork reads again from the start. At most `count` entries
and MAX_READ_BYTES (plus one entry) are read.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (version, ttl, baseline, mark, adropped, total)
KEYS[3] archive  LIST of replaced envelopes
ARGV[1] list     'live' to read the live list, 'archive' the archive
ARGV[2] from     the position to read from (>= 0)
ARGV[3] count    how many entries at most (> 0)
ARGV[4] at       the message id (JSON-escaped) a live read stops after
ARGV[5] version  the version the first read saw, or -1 for the first read
ARGV[6] fence    the position of a live entry read before, or -1 for none
ARGV[7] entry    that entry as it was read

Returns {head, envelopes...}, head being {version, ttl, baseline, mark, adropped,
archived, found, next}: the meta fields (nil when absent), the archive's length,
the position of `at` when this read ended on it (else -1), and the position after
the last entry read (-1 when the list ends there); or
{3, -1, reason} when the fence does not hold, {5, -1, reason} when the
conversation lost a key or its version is not a number.
]]
--- @include "lost"
--- @include "limits"
--- @include "ids"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local live, from, count, at = ARGV[1] == 'live', tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local expected, fence = tonumber(ARGV[5]), tonumber(ARGV[6])

local f = redis.call('HMGET', meta, 'version', 'ttl', 'baseline', 'mark', 'adropped', 'total')
local length = redis.call('LLEN', msgs)
local lost = keys_lost(f[6] ~= false, tonumber(f[6] or 0) or 0, length)
if lost then return lost end
local version = tonumber(f[1] or 0)
if not version then return {CORRUPT, -1, 'meta field version is not a number'} end
if expected >= 0 then
  if version ~= expected then
    return {STALE, -1, 'the conversation was rewritten while it was read (version ' .. expected .. ', now ' .. version .. ')'}
  end
  if fence >= 0 and redis.call('LINDEX', msgs, fence) ~= ARGV[7] then
    return {STALE, fence, 'the entry read at position ' .. fence .. ' is no longer there'}
  end
end

local archived = redis.call('LLEN', archive)
local key, size = msgs, length
if not live then key, size = archive, archived end
local stop = math.min(size - 1, from + count - 1)
local out, bytes, found, i = {false}, 0, -1, from
while i <= stop and found < 0 and bytes < MAX_READ_BYTES do
  local j = math.min(stop, i + math.max(1, math.floor((MAX_READ_BYTES - bytes) / MAX_ENTRY_BYTES)) - 1)
  for k, envelope in ipairs(redis.call('LRANGE', key, i, j)) do
    out[#out + 1] = envelope
    bytes = bytes + #envelope
    if live and envelope_id(envelope) == at then
      found = i + k - 1
      break
    end
  end
  i = j + 1
end

local after = from + #out - 1
if found >= 0 or after >= size then after = -1 end
out[1] = {version, f[2], f[3], f[4], f[5], archived, found, after}
return out
