-- The meta hash: token total, turn state, the conversation's TTL and the record
-- of its recent writes.
--- @include "codes"

local NO_CALLS = {}  -- the open call ids of every state without any; never written to

-- The last OPS_KEPT writes are recorded in the field 'ops', oldest first, each as
-- 10 bytes: its 6-byte operation token, then its result as a 4-byte integer.
local OPS_KEPT, OP_SIZE = 32, 10

-- The fields every write reads, in a table: total, role, open (a table of call
-- ids), ops (the write records), ttl (ms, 0 for none) and exists (whether the
-- conversation has a meta hash); or nil and {CORRUPT, -1, reason} when a field
-- is not what we wrote.
local function load_meta(meta)
  local f = redis.call('HMGET', meta, 'total', 'role', 'open', 'ttl', 'ops')
  local m = {exists = f[1] and true or false, total = tonumber(f[1] or 0), role = f[2] or '',
             open = NO_CALLS, ttl = tonumber(f[4] or 0), ops = f[5] or ''}
  local role = m.role
  if not m.total or not m.ttl then
    return nil, {CORRUPT, -1, 'meta field total or ttl is not a number'}
  end
  if not (role == '' or role == 'user' or role == 'assistant' or role == 'tool' or role == 'system') then
    return nil, {CORRUPT, -1, 'meta field role is not a role: ' .. role}
  end
  if f[3] and f[3] ~= '' then
    local ok, decoded = pcall(cjson.decode, f[3])
    if not ok or type(decoded) ~= 'table' then
      return nil, {CORRUPT, -1, 'meta field open is not a JSON array'}
    end
    for _, id in ipairs(decoded) do
      if type(id) ~= 'string' then return nil, {CORRUPT, -1, 'meta field open holds a non-string'} end
    end
    m.open = decoded
  end
  return m
end

-- The recorded result (an integer) of operation `op` if it was applied already,
-- else nil. A replay rewrites the records as they were: that write is replicated,
-- so a WAIT on the retry's connection also covers the original write.
local function replayed(meta, m, op)
  local at = string.find(m.ops, op, 1, true)
  while at and (at - 1) % OP_SIZE ~= 0 do at = string.find(m.ops, op, at + 1, true) end
  if not at then return nil end
  redis.call('HSET', meta, 'ops', m.ops)
  local a, b, c, d = string.byte(m.ops, at + 6, at + 9)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- Write `fields` (a flat list of names and values) to meta together with the
-- record of `op` and its `result` (an integer >= 0, or nil), and the TTL.
local function commit(meta, m, op, result, fields)
  local ops, r, i = m.ops, result or 0, #fields
  if #ops >= OPS_KEPT * OP_SIZE then ops = string.sub(ops, OP_SIZE + 1) end
  local bytes = string.char(math.floor(r / 16777216) % 256, math.floor(r / 65536) % 256,
                            math.floor(r / 256) % 256, r % 256)
  fields[i + 1], fields[i + 2] = 'ops', ops .. op .. bytes
  if m.new_ttl then fields[i + 3], fields[i + 4] = 'ttl', m.ttl end
  redis.call('HSET', meta, unpack(fields))
end
