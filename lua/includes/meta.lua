-- The meta hash: token total, turn state, the conversation's TTL and the record
-- of its recent writes. Read into locals, not a table: a script pays for every
-- table, closure and string it allocates (the GC charges each byte).
--- @include "codes"

local NO_CALLS = {}  -- the open call ids of every state without any; never written to

-- The last OPS_KEPT writes of each kind are recorded, oldest first: appends in the
-- field 'opa' as their 6-byte operation tokens; every other write in 'ops', its
-- token then its result as a 4-byte integer (10 bytes). An append's replay needs
-- no result, and every byte a script reads and writes costs.
local OPS_KEPT, TOKEN_SIZE, RESULT_SIZE = 32, 6, 4
local APPENDS, WRITES = 'opa', 'ops'

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

-- The recorded result (an integer; 0 for an append) of operation `op` if it was
-- applied already, else nil. A replay rewrites the records as they were: that
-- write is replicated, so a WAIT on the retry's connection also covers the
-- original write.
local function replayed(meta, ring, records, op)
  local size = ring == APPENDS and TOKEN_SIZE or TOKEN_SIZE + RESULT_SIZE
  local at = string.find(records, op, 1, true)
  while at and (at - 1) % size ~= 0 do at = string.find(records, op, at + 1, true) end
  if not at then return nil end
  redis.call('HSET', meta, ring, records)
  if size == TOKEN_SIZE then return 0 end
  local a, b, c, d = string.byte(records, at + TOKEN_SIZE, at + size - 1)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- Write the fields and values given after `new_ttl` to meta together with the
-- record of `op` (and its `result`, an integer >= 0 or nil, unless an append) in
-- `ring`, and the TTL to store (`new_ttl`, or nil to keep the stored one).
local function commit(meta, ring, records, op, result, new_ttl, ...)
  local record = op
  if ring == WRITES then
    local r = result or 0
    record = op .. string.char(math.floor(r / 16777216) % 256, math.floor(r / 65536) % 256,
                               math.floor(r / 256) % 256, r % 256)
  end
  if #records >= OPS_KEPT * #record then records = string.sub(records, #record + 1) end
  redis.call('HSET', meta, ring, records .. record, ...)
  if new_ttl then redis.call('HSET', meta, 'ttl', new_ttl) end
end
