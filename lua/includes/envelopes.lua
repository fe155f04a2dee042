-- Stored envelopes ({"t":..,"m":{"id":..,"role":..,...}}, with "x":1 and "s":1
-- between t and m when set, in either order), read with
-- patterns where that will do, decoded only where the message is needed.

-- The sum of the envelopes' token counts; nil and the 0-based index of the first
-- envelope without one.
local function sum_tokens(envelopes)
  local total = 0
  for i, envelope in ipairs(envelopes) do
    local t = string.match(envelope, '^{"t":(%d+),"')
    if not t then return nil, i - 1 end
    total = total + tonumber(t)
  end
  return total
end
