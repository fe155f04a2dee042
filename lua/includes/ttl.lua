-- The sliding TTL: every write refreshes the expiry of all the conversation's keys.

local function refresh_ttl(ttl, ...)
  if ttl and ttl > 0 then
    for _, key in ipairs({...}) do redis.call('PEXPIRE', key, ttl) end
  end
end

-- The TTL a write applies: the caller's (ARGV ttl > 0, stored when it differs)
-- or else the one stored with the conversation.
local function effective_ttl(m, ttl)
  if ttl > 0 then
    m.new_ttl = ttl ~= m.ttl
    m.ttl = ttl
  end
  return m.ttl
end
