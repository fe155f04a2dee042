-- Shared by the history scripts: result codes, meta-hash reads, the role and
-- tool-pairing state machine, and the sliding TTL. Pasted in place of
-- `--- @include "history"` when the scripts are loaded.

local OK, ROLE_ORDER, TOOL_PAIRING, STALE, LOCK_LOST, CORRUPT, INVALID_TRANSITION = 0, 1, 2, 3, 4, 5, 6
local CHUNK = 1000

-- Read the meta hash; nil plus a reason when a field is not what we wrote.
local function load_meta(meta)
  local f = redis.call('HMGET', meta, 'version', 'total', 'approx', 'since', 'role', 'open')
  local m = {version = tonumber(f[1] or 0), total = tonumber(f[2] or 0),
    approx = tonumber(f[3] or 0), since = tonumber(f[4] or 0), role = f[5] or '', open = {}}
  if not (m.version and m.total and m.approx and m.since) then
    for _, name in ipairs({'version', 'total', 'approx', 'since'}) do
      if m[name] == nil then return nil, 'meta field ' .. name .. ' is not a number' end
    end
  end
  if f[6] and f[6] ~= '' then
    local ok, open = pcall(cjson.decode, f[6])
    if not ok or type(open) ~= 'table' then return nil, 'meta field open is not a JSON array' end
    m.open = open
  end
  return m
end

-- A batch of messages in ARGV from position `at` (built by codec.Encoded.args):
--   exact (1|0), ttl (ms|0), tokens (the batch's sum), n, then n envelopes,
--   then per message: role, the call id it answers or '', k, and k tool call ids.
-- Returns the batch and the ARGV position after it.
local NO_CALLS = {}
local function read_batch(at)
  local n = tonumber(ARGV[at + 3])
  local items = {}
  local i = at + 4 + n
  for m = 1, n do
    local k = tonumber(ARGV[i + 2])
    local calls = NO_CALLS
    if k > 0 then
      calls = {}
      for j = 1, k do calls[j] = ARGV[i + 2 + j] end
    end
    items[m] = {r = ARGV[i], a = ARGV[i + 1], c = calls}
    i = i + 3 + k
  end
  return {exact = ARGV[at] == '1', ttl = tonumber(ARGV[at + 1]), tokens = tonumber(ARGV[at + 2]),
    first = at + 4, last = at + 3 + n, items = items}, i
end

local function index_of(list, value)
  for i = 1, #list do
    if list[i] == value then return i end
  end
  return nil
end

-- Check one role item ({r = role, a = answered id, c = call ids}) against the state (when `check`) and advance the state.
-- Returns nil, or {code, reason}.
local function advance(state, item, check)
  local role, prev = item.r, state.role
  if check then
    if role == 'system' then
      if prev ~= '' then return {ROLE_ORDER, 'a system message may only come first, not after ' .. prev} end
    elseif role == 'tool' then
      if type(item.a) ~= 'string' or not index_of(state.open, item.a) then
        return {TOOL_PAIRING, 'tool result for ' .. tostring(item.a) .. ' answers no open tool call'}
      end
    elseif role == 'user' or role == 'assistant' then
      if #state.open > 0 then
        return {TOOL_PAIRING, role .. ' message while tool calls are unanswered: ' .. table.concat(state.open, ', ')}
      end
      if role == 'user' and not (prev == '' or prev == 'system' or prev == 'assistant') then
        return {ROLE_ORDER, 'a user message may not follow ' .. prev}
      end
      if role == 'assistant' and not (prev == 'user' or prev == 'tool') then
        return {ROLE_ORDER, 'an assistant message may not follow ' .. (prev == '' and 'nothing' or prev)}
      end
    else
      return {ROLE_ORDER, 'unknown role ' .. tostring(role)}
    end
  end
  if role == 'assistant' then
    local open = {}
    for i, id in ipairs(item.c or {}) do open[i] = id end
    state.open = open
  elseif role == 'tool' then
    local at = index_of(state.open, item.a)
    if at then table.remove(state.open, at) end
  else
    state.open = {}
  end
  state.role = role
  return nil
end

-- Walk role items from `state`; returns nil or {code, index (0-based), reason}.
local function advance_all(state, items, check)
  for i, item in ipairs(items) do
    local err = advance(state, item, check)
    if err then return {err[1], i - 1, err[2]} end
  end
  return nil
end

local function encode_open(open)
  if #open == 0 then return '' end
  return cjson.encode(open)
end

-- Token count and exactness of a stored envelope, read without decoding the message.
local function envelope_tokens(envelope)
  local t, x = string.match(envelope, '^{"t":(%d+),"x":(%d)')
  if not t then return nil end
  return tonumber(t), x == '1'
end

-- Sum tokens of envelopes: total, inexact part; nil plus the bad index when one is corrupt.
local function sum_tokens(envelopes)
  local total, approx = 0, 0
  for i, envelope in ipairs(envelopes) do
    local t, exact = envelope_tokens(envelope)
    if not t then return nil, i - 1 end
    total = total + t
    if not exact then approx = approx + t end
  end
  return total, approx
end

-- Push values[first..last] in chunks; returns the list's length after the last push (nil if none).
local function push_all(command, key, values, first, last)
  local i, length = first, nil
  while i <= last do
    local j = math.min(i + CHUNK - 1, last)
    length = redis.call(command, key, unpack(values, i, j))
    i = j + 1
  end
  return length
end

local function refresh_ttl(ttl, ...)
  if ttl and ttl > 0 then
    for _, key in ipairs({...}) do redis.call('PEXPIRE', key, ttl) end
  end
end
