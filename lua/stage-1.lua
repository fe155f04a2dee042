--[[
stage: write part of a conversation copied whole (an import, a fork) to one of its
staging keys, under the conversation's hash tag, and make the key expire should
the copy never be put in place (lua/restore-8.lua renames the staging keys over
the conversation's). A push is fenced on the list's length, so a retried push
(redis-py resends a call whose reply was lost) is not pushed twice.

KEYS[1] key      the staging LIST, or HASH
ARGV[1] ttl      ms the key lives from now
ARGV[2] from     the list's length before this push; -1 to set a hash's fields
ARGV[3..] values the envelopes to push, or the hash's fields and values

Returns the key's length: for a push, from plus the envelopes pushed, or, having
pushed nothing, the list's length when it was not `from` long (pushed already,
or expired).
]]
--- @include "push"

local key, ttl, from = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local length
if from < 0 then
  push_all('HSET', key, ARGV, 3, #ARGV)  -- field and value pairs, in chunks
  length = redis.call('HLEN', key)
else
  length = redis.call('LLEN', key)
  if length ~= from then return length end
  length = push_all('RPUSH', key, ARGV, 3, #ARGV)
end
redis.call('PEXPIRE', key, ttl)
return length
