-- The records of a conversation's recent writes, kept in its meta hash, so that a
-- retried write is applied once (docs/internals.md, operation records).

--- @include "ring"

-- The recorded result (an integer; 0 for an append) of operation `op` if it was
-- applied already, else nil. A replay rewrites the records as they were: that
-- write is replicated, so a WAIT on the retry's connection also covers the
-- original write. An append a rollback or a truncate cut answers -1 instead, having
-- written nothing. (Its span's size and flag are written out: every constant a helper
-- takes from outside costs each call that defines it.)
local function replayed(meta, ring, records, op)
  local size = ring == APPENDS and TOKEN_SIZE + 2 or TOKEN_SIZE + RESULT_SIZE
  local at = string.find(records, op, 1, true)
  while at and (at - 1) % size ~= 0 do at = string.find(records, op, at + 1, true) end
  if not at then return nil end
  if ring == APPENDS and string.byte(records, at + TOKEN_SIZE) >= 128 then return -1 end
  redis.call('HSET', meta, ring, records)
  if ring == APPENDS then return 0 end
  local a, b, c, d = string.byte(records, at + TOKEN_SIZE, at + size - 1)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- Write the fields and values given after `new_ttl` to meta together with the
-- record of `op` in `ring`: with its `result`, an integer >= 0 (nil: 0), or for an append
-- its span as sent (2 bytes); and the TTL to store (`new_ttl`, or nil to keep the stored one).
local function commit(meta, ring, records, op, result, new_ttl, ...)
  local tail, kept, dropped = result, OPS_KEPT + APPENDS_DROPPED - 1, APPENDS_DROPPED
  if ring == WRITES then
    local r = result or 0
    tail, kept, dropped = string.char(math.floor(r / 16777216) % 256, math.floor(r / 65536) % 256,
                                      math.floor(r / 256) % 256, r % 256), OPS_KEPT, 1
  end
  local size = #op + #tail
  if #records >= kept * size then records = string.sub(records, dropped * size + 1) end
  redis.call('HSET', meta, ring, records .. op .. tail, ...)
  if new_ttl then redis.call('HSET', meta, 'ttl', new_ttl) end
end
