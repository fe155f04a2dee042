-- Blobs: inline data of content parts kept outside the list, as meta hash fields
-- 'blob:<digest>' (redis_history/store/blobs.py); the meta field 'blobs' counts their bytes.
-- A write sends them in ARGV as k, then k pairs of digest and data.
--- @include "codes"
--- @include "limits"

-- The blobs section at ARGV[at]: k, the bytes of those the meta hash lacks, and the position
-- after the section; or nil and a refusal when they would take the conversation past
-- MAX_BLOB_TOTAL. Writes nothing.
local function read_blobs(meta, at)
  local k, added = tonumber(ARGV[at]), 0
  for i = 1, k do
    if redis.call('HEXISTS', meta, 'blob:' .. ARGV[at + 2 * i - 1]) == 0 then
      added = added + #ARGV[at + 2 * i]
    end
  end
  if added > 0 then
    local held = tonumber(redis.call('HGET', meta, 'blobs') or '0') or 0
    if held + added > MAX_BLOB_TOTAL then
      return nil, {LIMIT, -1, 'the conversation would keep more than ' .. MAX_BLOB_TOTAL .. ' bytes of inline data'}
    end
  end
  return k, added, at + 1 + 2 * k
end

-- Store the blobs of the section at ARGV[at] (read_blobs's k and added).
local function write_blobs(meta, at, k, added)
  for i = 1, k do
    redis.call('HSETNX', meta, 'blob:' .. ARGV[at + 2 * i - 1], ARGV[at + 2 * i])
  end
  if added > 0 then redis.call('HINCRBY', meta, 'blobs', added) end
end
