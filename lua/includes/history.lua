-- Shared by the history scripts: result codes, meta-hash reads, the role and
-- tool-pairing state machine, and the sliding TTL. Pasted in place of
-- `--- @include "history"` when the scripts are loaded.

local OK, ROLE_ORDER, TOOL_PAIRING, STALE, LOCK_LOST, CORRUPT, INVALID_TRANSITION = 0, 1, 2, 3, 4, 5, 6
local CHUNK = 1000

-- Read the meta hash; nil plus a reason when a field is not what we wrote.
local function load_meta(meta)
  local f = redis.call('HMGET', meta, 'version', 'total', 'approx', 'since', 'role', 'open')
  local m = {role = f[5] or '', open = {}}
  local names = {'version', 'total', 'approx', 'since'}
  for i = 1, 4 do
    local v = f[i]
    if v then
      v = tonumber(v)
      if v == nil then return nil, 'meta field ' .. names[i] .. ' is not a number' end
    end
    m[names[i]] = v or 0
  end
  if f[6] and f[6] ~= '' then
    local ok, open = pcall(cjson.decode, f[6])
    if not ok or type(open) ~= 'table' then return nil, 'meta field open is not a JSON array' end
    m.open = open
  end
  return m
end

local function index_of(list, value)
  for i = 1, #list do
    if list[i] == value then return i end
  end
  return nil
end

-- Check one message header against the state (when `check`) and advance the state.
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

-- Walk a header list from `state`; returns nil or {code, index (0-based), reason}.
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

local function header_sums(items)
  local total = 0
  for _, item in ipairs(items) do total = total + item.t end
  return total
end
