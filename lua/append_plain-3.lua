--[[
append_plain: append-4.lua for the most common writes, plain messages (user, system, or
assistant without tool calls; one, or a short turn of them) with no inline data kept
outside the list and not staged: the same checks,
records, TTL and replies, written out in one piece. Lua makes every function a script
defines again at each call, and the caller waits for each µs Redis spends once more
(benchmarks/bench_script_cost.py: this path costs Redis 6-7.5 µs less than append-4.lua's
thirteen helpers), so it defines none. The rules are walk.lua's for these roles;
tests/test_plain_append.py holds the two scripts to the same replies and writes.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (total, role, open, ttl, and the records of recent appends)
KEYS[3] archive  LIST (only its TTL is refreshed)
ARGV[1] op       the operation token (derived from the batch's message ids)
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check role order and tool pairing, 0 to only track them
ARGV[4] tokens   the batch's token count
ARGV[5] n        how many messages (at most PLAIN_BATCH in redis_history/store/_core.py)
ARGV[6..]        their n envelopes, then their n roles (user, system or assistant)

Returns what append-4.lua returns for them.
]]
--- @include "codes"
--- @include "ring"

local msgs, meta, op, n = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[5])
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
local closes = open  -- calls left open are closed by a plain message (checks off, or a system one)
if ARGV[3] == '1' then
  for i = 0, n - 1 do
    local role, code, why = ARGV[6 + n + i], ROLE_ORDER, nil
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
      return {code, i, why}
    end
    last, open = role, false
  end
else
  last = ARGV[5 + 2 * n]
end

-- Onto a list the meta hash counts tokens of, RPUSHX: if the list was lost it pushes
-- nothing (0), and the append is refused having written nothing.
length = redis.call(total > 0 and 'RPUSHX' or 'RPUSH', msgs, unpack(ARGV, 6, 5 + n))
if length == 0 then
  return {CORRUPT, -1, 'the messages are gone while the meta hash counts ' .. total .. ' tokens (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
end
if #records >= OPS_KEPT * TOKEN_SIZE then records = string.sub(records, TOKEN_SIZE + 1) end
total = total + tonumber(ARGV[4])
if closes then
  redis.call('HSET', meta, APPENDS, records .. op, 'role', last, 'total', total, 'open', '')
else
  redis.call('HSET', meta, APPENDS, records .. op, 'role', last, 'total', total)
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
