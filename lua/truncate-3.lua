--[[
truncate: keep at most n messages (roll back a failed turn). The role and
tool-pairing state is rebuilt from the new tail; the token baseline is reset.
A no-op, baseline included, when n >= length.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] n        messages to keep (>= 0)
ARGV[2] ttl      ms, or 0

Returns the number removed, or {5, index, reason} having written nothing.
]]
--- @include "codes"
--- @include "meta"
--- @include "ttl"
--- @include "rewrite"
--- @include "envelopes"

local msgs, meta, archive = KEYS[1], KEYS[2], KEYS[3]
local keep, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local total, why = load_meta(meta)
if not total then return {CORRUPT, -1, why} end
local length = redis.call('LLEN', msgs)
if keep >= length then return 0 end

local removed = redis.call('LRANGE', msgs, keep, -1)
local gone, bad = sum_tokens(removed)
if not gone then return {CORRUPT, keep + bad, 'stored envelope has no token count'} end

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
    answered[m.tool_call_id] = true
  else
    if m.role == 'assistant' and type(m.tool_calls) == 'table' then
      for _, call in ipairs(m.tool_calls) do
        if not answered[call.id] then open[#open + 1] = call.id end
      end
    end
    break
  end
end

if keep == 0 then redis.call('DEL', msgs) else redis.call('LTRIM', msgs, 0, keep - 1) end
rewritten(meta, total - gone, role, open)
refresh_ttl(ttl, msgs, meta, archive)
return length - keep
