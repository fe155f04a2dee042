-- Reading list entries within a byte budget.
--- @include "limits"

-- The entries of `key` from `from` to `to` (0-based, inclusive), oldest first, and their
-- bytes; or nil and the bytes read once they pass `budget`. Read a few at a time, as few as
-- the budget left allows entries of the largest size a history writes, so a read passes
-- the budget by one entry at most.
local function read_range(key, from, to, budget)
  local out, bytes, i = {}, 0, from
  while i <= to do
    local last = math.min(to, i + math.max(1, math.floor((budget - bytes) / MAX_ENTRY_BYTES)) - 1)
    for _, envelope in ipairs(redis.call('LRANGE', key, i, last)) do
      out[#out + 1] = envelope
      bytes = bytes + #envelope
    end
    if bytes > budget then return nil, bytes end
    i = last + 1
  end
  return out, bytes
end
