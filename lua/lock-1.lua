--[[
lock: extend or release the compaction lock, if the caller's token still holds it (what
redis-py's lock runs as scripts of its own, kept here so that a user who may run only the
store's functions can hold the lock).

KEYS[1] lock     STRING the lock's token (set by SET NX PX)
ARGV[1] token    the caller's token
ARGV[2] ttl      ms the lock lives from now on, or 0 to release it

Returns 1 if the token holds the lock (now extended or released), else 0.
]]

local lock = KEYS[1]
if redis.call('GET', lock) ~= ARGV[1] then return 0 end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  redis.call('DEL', lock)
else
  redis.call('PEXPIRE', lock, ttl)
end
return 1
