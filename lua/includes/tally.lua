-- Counting the pieces of inline data stored envelopes name (lua/includes/blobs.lua): an
-- envelope's head names them, '"b":"<digest><digest>..."' between its flags, so no message
-- is decoded. An envelope written before pieces were counted names none there.

-- Add `sign` to counts[digest] for every piece each of `envelopes` names.
local function tally(counts, envelopes, sign)
  for _, envelope in ipairs(envelopes) do
    local flags = string.match(envelope, '^{"t":%d+,([%w":,]-)"m":{')
    local names = flags and string.match(flags, '"b":"(%x+)"')
    if names then
      for i = 1, #names - 31, 32 do
        local name = string.sub(names, i, i + 31)
        counts[name] = (counts[name] or 0) + sign
      end
    end
  end
end
