-- The sliding TTL: every write refreshes the expiry of all the conversation's keys.

local function refresh_ttl(ttl, ...)
  if ttl > 0 then
    for _, key in ipairs({...}) do redis.call('PEXPIRE', key, ttl) end
  end
end

-- The TTL a write applies, the caller's (`requested` > 0) or else the `stored`
-- one; and the value to store, or nil when the stored one stands.
local function effective_ttl(stored, requested)
  if requested > 0 and requested ~= stored then return requested, requested end
  return stored, nil
end
