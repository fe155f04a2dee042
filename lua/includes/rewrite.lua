-- The bookkeeping every rewrite shares.
--- @include "meta"
--- @include "open"

-- After a rewrite (replace, splice, truncate, rollback): the new total and turn
-- state, the op record, the TTL to store, the records of appends when the rewrite
-- changed their spans (`appends`, else nil: spans.lua), the next version, and no
-- baseline, since no LLM has seen this history yet.
local function rewritten(meta, records, op, result, total, role, open, new_ttl, appends)
  if appends then
    commit(meta, WRITES, records, op, result, new_ttl, 'total', total, 'role', role, 'open', encode_open(open), APPENDS, appends)
  else
    commit(meta, WRITES, records, op, result, new_ttl, 'total', total, 'role', role, 'open', encode_open(open))
  end
  redis.call('HDEL', meta, 'baseline', 'mark')
  redis.call('HINCRBY', meta, 'version', 1)
end
