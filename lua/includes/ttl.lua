-- The sliding TTL: every write refreshes the expiry of all the conversation's keys.

local function refresh_ttl(ttl, ...)
  if ttl and ttl > 0 then
    for _, key in ipairs({...}) do redis.call('PEXPIRE', key, ttl) end
  end
end
