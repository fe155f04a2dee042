-- The bookkeeping every rewrite shares.
--- @include "meta"
--- @include "open"

-- After a rewrite (replace, splice, truncate, rollback): the new total and turn
-- state, the op record, the next version, and no baseline, since no LLM has seen
-- this history yet.
local function rewritten(meta, m, op, result, total, role, open)
  commit(meta, m, op, result, {'total', total, 'role', role, 'open', encode_open(open)})
  redis.call('HDEL', meta, 'baseline', 'mark')
  redis.call('HINCRBY', meta, 'version', 1)
end
