-- The bookkeeping every rewrite shares. Needs "meta".

-- After a rewrite (replace, splice, truncate): the new total and turn state, the
-- next version, and no baseline, since no LLM has seen this history yet.
local function rewritten(meta, total, role, open)
  redis.call('HSET', meta, 'total', total, 'role', role, 'open', encode_open(open))
  redis.call('HDEL', meta, 'baseline', 'mark')
  redis.call('HINCRBY', meta, 'version', 1)
end
