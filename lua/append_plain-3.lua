--[[
append_plain: append-4.lua for the most common write, one plain message (user, system, or
assistant without tool calls) with no inline data kept outside the list: the same checks,
records, TTL and replies, written out in one piece. Lua makes every function a script
defines again at each call, and the caller waits for each µs Redis spends once more
(benchmarks/bench_script_cost.py: this path costs Redis 6-7.5 µs less than append-4.lua's
thirteen helpers), so it defines none. The rules are walk.lua's for these roles;
tests/test_plain_append.py holds the two scripts to the same replies and writes.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (total, role, open, ttl, and the records of recent appends)
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] op       the operation token (derived from the message id)
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check role order and tool pairing, 0 to only track them
ARGV[4] tokens   the message's token count
ARGV[5] envelope
ARGV[6] role     user, system or assistant

Returns what append-4.lua returns for it.
]]
--- @include "codes"
--- @include "ring"

local msgs, meta, op, role = KEYS[1], KEYS[2], ARGV[1], ARGV[6]
local f = redis.call('HMGET', meta, 'total', 'role', 'open', APPENDS, 'ttl')
local total, last, ttl = tonumber(f[1] or 0), f[2] or '', tonumber(f[5] or 0)
if not total or not ttl then return {CORRUPT, -1, 'meta field total or ttl is not a number'} end
if not (last == '' or last == 'user' or last == 'assistant' or last == 'tool' or last == 'system') then
  return {CORRUPT, -1, 'meta field role is not a role: ' .. last}
end
local open = f[3]
if open == '' then open = false end
if open then
  local ok, decoded = pcall(cjson.decode, open)
  if not ok or type(decoded) ~= 'table' then return {CORRUPT, -1, 'meta field open is not a JSON array'} end
  for _, id in ipairs(decoded) do
    if type(id) ~= 'string' then return {CORRUPT, -1, 'meta field open holds a non-string'} end
  end
  open = #decoded > 0 and decoded
end
local exists, records = f[1] ~= false, f[4] or ''

-- A replay: the records rewritten as they were (so a WAIT covers the original write).
local at = string.find(records, op, 1, true)
while at and (at - 1) % TOKEN_SIZE ~= 0 do at = string.find(records, op, at + 1, true) end
if at then
  redis.call('HSET', meta, APPENDS, records)
  return {0, redis.call('LLEN', msgs)}
end

-- A conversation that lost a key is refused before anything is checked against its state:
-- the meta hash is gone while messages remain, or the list while the hash counts tokens.
local length
if not exists then
  length = redis.call('LLEN', msgs)
  if length > 0 then
    return {CORRUPT, -1, 'the meta hash is gone while messages remain (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
  end
end
if ARGV[3] == '1' then
  local code, why = ROLE_ORDER, nil
  if role == 'system' then
    if last ~= '' then why = 'a system message may only come first, not after ' .. last end
  elseif open then
    code, why = TOOL_PAIRING, role .. ' message while tool calls are unanswered: ' .. table.concat(open, ', ')
  elseif role == 'user' then
    if not (last == '' or last == 'system' or last == 'assistant') then why = 'a user message may not follow ' .. last end
  elseif role == 'assistant' then
    if not (last == 'user' or last == 'tool') then
      why = 'an assistant message may not follow ' .. (last == '' and 'nothing' or last)
    end
  else
    why = 'unknown role ' .. role
  end
  if why then  -- unless the stored state it checked against is lost
    if exists and total > 0 and (length or redis.call('LLEN', msgs)) == 0 then
      return {CORRUPT, -1, 'the messages are gone while the meta hash counts ' .. total .. ' tokens (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
    end
    return {code, 0, why}
  end
end

-- Onto a list the meta hash counts tokens of, RPUSHX: if the list was lost it pushes
-- nothing (0), and the append is refused having written nothing.
length = redis.call(total > 0 and 'RPUSHX' or 'RPUSH', msgs, ARGV[5])
if length == 0 then
  return {CORRUPT, -1, 'the messages are gone while the meta hash counts ' .. total .. ' tokens (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
end
if #records >= OPS_KEPT * TOKEN_SIZE then records = string.sub(records, TOKEN_SIZE + 1) end
total = total + tonumber(ARGV[4])
if open then  -- calls left unanswered with checks off: a plain message closes them
  redis.call('HSET', meta, APPENDS, records .. op, 'role', role, 'total', total, 'open', '')
else
  redis.call('HSET', meta, APPENDS, records .. op, 'role', role, 'total', total)
end
local requested = tonumber(ARGV[2])
if requested > 0 and requested ~= ttl then
  ttl = requested
  redis.call('HSET', meta, 'ttl', ttl)
end
if ttl > 0 then
  redis.call('PEXPIRE', msgs, ttl)
  redis.call('PEXPIRE', meta, ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return length
