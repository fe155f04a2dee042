-- Pushing many values onto a list without exceeding Lua's unpack limit.

local CHUNK = 1000

-- Push values[first..last] in chunks; returns the list's length after the last push (nil if none).
local function push_all(command, key, values, first, last)
  if first == last then return redis.call(command, key, values[first]) end
  local i, length = first, nil
  while i <= last do
    local j = math.min(i + CHUNK - 1, last)
    length = redis.call(command, key, unpack(values, i, j))
    i = j + 1
  end
  return length
end
