-- The meta hash: token total, turn state, the conversation's TTL and its ring of
-- recent operations.
--- @include "codes"

local NO_CALLS = {}  -- the open call ids of every state without any; never written to
local ROLES = {[''] = true, system = true, user = true, assistant = true, tool = true}
-- How many recent operations meta remembers, so that a retried one is not applied twice.
local OPS_KEPT = 64

-- The fields every write reads, in a table: total, role, open (a table of call
-- ids), ops and opn (the operation ring and its size), ttl (ms, 0 for none) and
-- exists (whether the conversation has a meta hash at all); or nil and
-- {CORRUPT, -1, reason} when a field is not what we wrote.
local function load_meta(meta)
  local f = redis.call('HMGET', meta, 'total', 'role', 'open', 'ops', 'opn', 'ttl')
  local m = {exists = f[1] and true or false, total = tonumber(f[1] or 0),
             role = f[2] or '', open = NO_CALLS, ops = f[4] or '', opn = tonumber(f[5] or 0),
             ttl = tonumber(f[6] or 0)}
  if not m.total then return nil, {CORRUPT, -1, 'meta field total is not a number'} end
  if not ROLES[m.role] then return nil, {CORRUPT, -1, 'meta field role is not a role: ' .. m.role} end
  if not m.opn or not m.ttl then return nil, {CORRUPT, -1, 'meta field opn or ttl is not a number'} end
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

-- The recorded result of operation `op` if it was applied already ('' when it
-- recorded none), else nil. Tokens are fixed-width hex, results have no spaces.
-- A replay rewrites one field as it was: that write is replicated, so a WAIT on
-- the retry's connection also covers the original write, which came before it.
local function replayed(meta, m, op)
  local at = string.find(m.ops, ' ' .. op, 1, true)
  if not at then return nil end
  redis.call('HSET', meta, 'opn', m.opn)
  local after = at + #op + 1
  if string.sub(m.ops, after, after) ~= '=' then return '' end
  return string.match(m.ops, '^[^ ]*', after + 1)
end

-- Write `fields` (a flat list of names and values) to meta together with the
-- record of `op` (and its `result`, if any) and the conversation's TTL.
local function commit(meta, m, op, result, fields)
  local ring, n = m.ops, m.opn
  if n >= OPS_KEPT then
    local cut = string.find(ring, ' ', 2, true)
    ring, n = cut and string.sub(ring, cut) or '', n - 1
  end
  local entry = result and (' ' .. op .. '=' .. result) or (' ' .. op)
  local i = #fields
  fields[i + 1], fields[i + 2], fields[i + 3], fields[i + 4] = 'ops', ring .. entry, 'opn', n + 1
  if m.new_ttl then fields[i + 5], fields[i + 6] = 'ttl', m.ttl end
  redis.call('HSET', meta, unpack(fields))
end
