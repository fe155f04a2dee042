--[[
truncate: keep at most n messages (roll back a failed turn). The role and
tool-pairing state is rebuilt from the new tail; the token baseline is reset.
A no-op, baseline included, when n >= length.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] n        messages to keep (>= 0)
ARGV[2] ttl      ms, or 0

Returns {0, removed, version}, or {5, index, reason} having written nothing.
]]
--- @include "history"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local keep, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local state, why = load_meta(meta)
if not state then return {CORRUPT, -1, why} end
local length = redis.call('LLEN', msgs)
if keep >= length then return {OK, 0, state.version} end

local removed = redis.call('LRANGE', msgs, keep, -1)
local gone, gone_approx = sum_tokens(removed)
if not gone then return {CORRUPT, keep + gone_approx, 'stored envelope has no token count'} end

-- The new tail's state: its last role, and the calls of the latest assistant not yet answered.
local role, open, answered = '', {}, {}
for i = keep - 1, 0, -1 do
  local ok, decoded = pcall(cjson.decode, redis.call('LINDEX', msgs, i))
  if not ok or type(decoded) ~= 'table' or type(decoded.m) ~= 'table' then
    return {CORRUPT, i, 'stored envelope is not JSON'}
  end
  local m = decoded.m
  if role == '' then role = m.role end
  if m.role == 'tool' then
    answered[#answered + 1] = m.tool_call_id
  else
    if m.role == 'assistant' and type(m.tool_calls) == 'table' then
      for _, call in ipairs(m.tool_calls) do
        if not index_of(answered, call.id) then open[#open + 1] = call.id end
      end
    end
    break
  end
end

if keep == 0 then redis.call('DEL', msgs) else redis.call('LTRIM', msgs, 0, keep - 1) end
redis.call('HSET', meta, 'role', role, 'open', encode_open(open), 'total', state.total - gone,
  'approx', state.approx - gone_approx, 'since', 0, 'version', state.version + 1)
redis.call('HDEL', meta, 'baseline')
refresh_ttl(ttl, msgs, meta, archive)
return {OK, length - keep, state.version + 1}
