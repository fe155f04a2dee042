-- The counts in a memory owner's stats hash, checked before a script uses them.
--- @include "codes"

-- The fields `...` of the stats hash as integers (0 when missing), or nil and
-- {CORRUPT, -1, reason}.
local function read_counts(stats, ...)
  local names = {...}
  local values = redis.call('HMGET', stats, ...)
  for i = 1, #names do
    local v = values[i]
    if not v then
      values[i] = 0
    elseif #v > 15 or not string.find(v, '^%-?%d+$') then
      return nil, {CORRUPT, -1, stats .. ' field ' .. names[i] .. ' is not an integer: ' .. v}
    else
      values[i] = tonumber(v)
    end
  end
  return values
end
