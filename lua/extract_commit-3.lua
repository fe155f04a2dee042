--[[
extract_commit: end a run of memory extraction over a conversation
(redis_history/memory/extraction.py): if the run's token still holds the conversation's
extraction claim, move the cursor to the last message it extracted and count them, then
release the claim. A run whose claim ran out (another run may hold it now) changes nothing.
The state notes the token of the last run that moved the cursor, so that the same commit sent
again (its reply lost, redis-py re-sent it) answers as the first did.

KEYS[1] claim    STRING  the token of the run holding the claim (SET NX PX)
KEYS[2] state    HASH    last (the id of the last message extracted), count (messages), by
                         (the token of the run that moved it)
KEYS[3] meta     HASH    the conversation's: the state takes its time to live, if it has one,
                         so that it goes with the conversation
ARGV[1] token    the run's token
ARGV[2] last     the id of the last message it extracted ('' to release only)
ARGV[3] count    how many messages it extracted

Returns 1 when it held the claim (or this commit was applied already), else 0.
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  if ARGV[2] ~= '' and redis.call('HGET', KEYS[2], 'by') == ARGV[1] then return 1 end
  return 0
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], 'last', ARGV[2], 'by', ARGV[1])
  redis.call('HINCRBY', KEYS[2], 'count', ARGV[3])
  local ttl = redis.call('PTTL', KEYS[3])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
end
redis.call('DEL', KEYS[1])
return 1
