-- A check a memory script makes before it reads or writes: each key of the owner holds the
-- data type the memory keeps there. A check that fails gives {CORRUPT, -1, reason} naming the
-- key, which the script returns having written nothing (Redis does not undo a script's
-- writes when a later command fails).
--- @include "codes"

-- {CORRUPT, -1, reason} for the first of KEYS[first..last] that exists and is not a `kind`.
local function check_types(first, last, kind)
  for i = first, last do
    local found = redis.call('TYPE', KEYS[i])
    found = found.ok or found
    if found ~= kind and found ~= 'none' then
      return {CORRUPT, -1, KEYS[i] .. ' holds a ' .. found .. ', not a ' .. kind}
    end
  end
end
