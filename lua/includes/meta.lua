-- The meta hash: token total, turn state, the conversation's TTL and the record
-- of its recent writes. Read into locals, not a table: a script pays for every
-- table, closure and string it allocates (the GC charges each byte).
--- @include "codes"
--- @include "records"

local NO_CALLS = {}  -- the open call ids of every state without any; never written to

-- The fields every write reads: total, role, open (a table of call ids), ttl (ms,
-- 0 for none), the records of the write's kind (`ring`, APPENDS or WRITES) and
-- whether the conversation exists (has a meta hash); or nil and
-- {CORRUPT, -1, reason} when a field is not what we wrote.
local function read_meta(meta, ring)
  local f = redis.call('HMGET', meta, 'total', 'role', 'open', 'ttl', ring)
  local total, role, ttl = tonumber(f[1] or 0), f[2] or '', tonumber(f[4] or 0)
  if not total or not ttl then
    return nil, {CORRUPT, -1, 'meta field total or ttl is not a number'}
  end
  if not (role == '' or role == 'user' or role == 'assistant' or role == 'tool' or role == 'system') then
    return nil, {CORRUPT, -1, 'meta field role is not a role: ' .. role}
  end
  local open = NO_CALLS
  if f[3] and f[3] ~= '' then
    local ok, decoded = pcall(cjson.decode, f[3])
    if not ok or type(decoded) ~= 'table' then
      return nil, {CORRUPT, -1, 'meta field open is not a JSON array'}
    end
    for _, id in ipairs(decoded) do
      if type(id) ~= 'string' then return nil, {CORRUPT, -1, 'meta field open holds a non-string'} end
    end
    open = decoded
  end
  return total, role, open, ttl, f[5] or '', f[1] ~= false
end
