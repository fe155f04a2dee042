--[[
append_small: append-5.lua for the most common writes, a short batch (one message, or a
turn of up to SMALL_BATCH in redis_history/store/_core.py) that keeps no inline data
outside the list and is not staged: the same checks, records, TTL and replies, written
out in one piece. Lua makes every function a script defines again at each call, and the
caller waits for each µs Redis spends once more (benchmarks/bench_script_cost.py:
append-5.lua's thirteen helpers cost Redis about 6 µs a call), so this defines none. The
rules are walk.lua's, its table of open call positions a scan of the few open ids;
tests/test_small_append.py holds the two scripts to the same replies and writes.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (total, role, open, ttl, and the records of recent appends)
KEYS[3] archive  LIST (only its TTL is refreshed)
KEYS[4] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token (derived from the batch's message ids)
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check role order (the strict rules) and tool pairing, l the same by the
                 lenient rules (walk.lua), 0 to only track them
ARGV[4] tokens   the batch's token count
ARGV[5] n        how many messages, as 2 bytes (big-endian): the span of its record
ARGV[6..]        their n envelopes, then their n role items (walk.lua's)

Returns what append-5.lua returns for them.
]]
--- @include "codes"
--- @include "ring"

local msgs, meta, op, n = KEYS[1], KEYS[2], ARGV[1], string.byte(ARGV[5], 2)
local f = redis.call('HMGET', meta, 'total', 'role', 'open', APPENDS, 'ttl')
local total, last, ttl = tonumber(f[1] or 0), f[2] or '', tonumber(f[5] or 0)
if not total or not ttl then return {CORRUPT, -1, 'meta field total or ttl is not a number'} end
if not (last == '' or last == 'user' or last == 'assistant' or last == 'tool' or last == 'system') then
  return {CORRUPT, -1, 'meta field role is not a role: ' .. last}
end
local open = {}  -- the open call ids, oldest first; an answered one becomes false
if f[3] and f[3] ~= '' then
  local ok, decoded = pcall(cjson.decode, f[3])
  if not ok or type(decoded) ~= 'table' then return {CORRUPT, -1, 'meta field open is not a JSON array'} end
  for _, id in ipairs(decoded) do
    if type(id) ~= 'string' then return {CORRUPT, -1, 'meta field open holds a non-string'} end
  end
  open = decoded
end
local exists, records = f[1] ~= false, f[4] or ''

-- A replay: the records rewritten as they were (so a WAIT covers the original write);
-- refused, writing nothing, when a rollback or a truncate cut the batch.
local at = string.find(records, op, 1, true)
while at and (at - 1) % APPEND_SIZE ~= 0 do at = string.find(records, op, at + 1, true) end
if at then
  if string.byte(records, at + TOKEN_SIZE) >= 128 then return {STALE, -1, PARTLY_REMOVED} end  -- cut
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

-- walk.lua's rules, item by item.
local lenient = ARGV[3] == 'l'
local check, left, changed, gone = lenient or ARGV[3] == '1', #open, false, nil
at = 6 + n
for i = 0, n - 1 do
  local prev, role, answered, j, k = last, ARGV[at], nil, nil, 0
  local ids = at + 2
  if role == 'tool' then
    answered, at = ARGV[at + 1], at + 2
    if left > 0 and not (gone and gone[answered]) then  -- an id answers its call once
      for x = 1, #open do
        if open[x] == answered then j = x break end
      end
    end
  elseif role == 'assistant' then
    k = tonumber(ARGV[at + 1])
    at = ids + k
  else
    at = at + 1
  end
  if check then
    local code, why = ROLE_ORDER, nil
    if role == 'system' then
      if prev ~= '' then why = 'a system message may only come first, not after ' .. prev end
    elseif role == 'tool' then
      if not j then code, why = TOOL_PAIRING, 'tool result for ' .. answered .. ' answers no open tool call' end
    elseif role == 'user' or role == 'assistant' then
      if left > 0 then
        local rest = {}
        for x = 1, #open do
          if open[x] then rest[#rest + 1] = open[x] end
        end
        code, why = TOOL_PAIRING, role .. ' message while tool calls are unanswered: ' .. table.concat(rest, ', ')
      elseif lenient then
        if role == 'assistant' and (prev == '' or prev == 'system') then
          why = 'an assistant message may not follow ' .. (prev == '' and 'nothing' or prev)
        end
      elseif role == 'user' and not (prev == '' or prev == 'system' or prev == 'assistant') then
        why = 'a user message may not follow ' .. prev
      elseif role == 'assistant' and not (prev == 'user' or prev == 'tool') then
        why = 'an assistant message may not follow ' .. (prev == '' and 'nothing' or prev)
      end
    else
      why = 'unknown role ' .. tostring(role)
    end
    if why then  -- unless the stored state it checked against is lost
      if exists and total > 0 and (length or redis.call('LLEN', msgs)) == 0 then
        return {CORRUPT, -1, 'the messages are gone while the meta hash counts ' .. total .. ' tokens (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
      end
      return {code, i, why}
    end
  end
  if role == 'tool' then
    if j then
      open[j], left, changed = false, left - 1, true
      gone = gone or {}
      gone[answered] = true
    end
  elseif k > 0 then
    open, left, changed, gone = {}, k, true, nil
    for x = 1, k do open[x] = ARGV[ids + x - 1] end
  elseif #open > 0 then
    open, left, changed, gone = {}, 0, true, nil
  end
  last = role
end
if left < #open then
  local rest = {}
  for x = 1, #open do
    if open[x] then rest[#rest + 1] = open[x] end
  end
  open = rest
end

-- Onto a list the meta hash counts tokens of, RPUSHX: if the list was lost it pushes
-- nothing (0), and the append is refused having written nothing.
length = redis.call(total > 0 and 'RPUSHX' or 'RPUSH', msgs, unpack(ARGV, 6, 5 + n))
if length == 0 then
  return {CORRUPT, -1, 'the messages are gone while the meta hash counts ' .. total .. ' tokens (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
end
if #records >= (OPS_KEPT + APPENDS_DROPPED - 1) * APPEND_SIZE then
  records = string.sub(records, APPENDS_DROPPED * APPEND_SIZE + 1)
end
records = records .. op .. ARGV[5]  -- the record: token, span
total = total + tonumber(ARGV[4])
if changed then
  redis.call('HSET', meta, APPENDS, records, 'role', last, 'total', total, 'open', #open == 0 and '' or cjson.encode(open))
else
  redis.call('HSET', meta, APPENDS, records, 'role', last, 'total', total)
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
  redis.call('PEXPIRE', KEYS[4], ttl)
end
return length
