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
--   then n role items: role, the call id it answers or '', k, and k tool call ids.
-- Returns the batch and the ARGV position after it.
local function read_batch(at)
  local n = tonumber(ARGV[at + 3])
  local roles = at + 4 + n
  local after = roles
  for _ = 1, n do after = after + 3 + tonumber(ARGV[after + 2]) end
  return {exact = ARGV[at] == '1', ttl = tonumber(ARGV[at + 1]), tokens = tonumber(ARGV[at + 2]),
    n = n, first = at + 4, last = at + 3 + n, roles = roles}, after
end

local function index_of(list, value)
  for i = 1, #list do
    if list[i] == value then return i end
  end
  return nil
end

local NO_CALLS = {}  -- shared by every state without open calls; never written to

-- Check the role item at ARGV[at] against the state (when `check`) and advance the state.
-- Returns the next item's position, or nil and {code, reason}.
local function advance(state, at, check)
  local role, answered, k, prev = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2]), state.role
  if check then
    if role == 'system' then
      if prev ~= '' then return nil, {ROLE_ORDER, 'a system message may only come first, not after ' .. prev} end
    elseif role == 'tool' then
      if not index_of(state.open, answered) then
        return nil, {TOOL_PAIRING, 'tool result for ' .. answered .. ' answers no open tool call'}
      end
    elseif role == 'user' or role == 'assistant' then
      if #state.open > 0 then
        return nil, {TOOL_PAIRING, role .. ' message while tool calls are unanswered: ' .. table.concat(state.open, ', ')}
      end
      if role == 'user' and not (prev == '' or prev == 'system' or prev == 'assistant') then
        return nil, {ROLE_ORDER, 'a user message may not follow ' .. prev}
      end
      if role == 'assistant' and not (prev == 'user' or prev == 'tool') then
        return nil, {ROLE_ORDER, 'an assistant message may not follow ' .. (prev == '' and 'nothing' or prev)}
      end
    else
      return nil, {ROLE_ORDER, 'unknown role ' .. tostring(role)}
    end
  end
  if role == 'assistant' and k > 0 then
    local open = {}
    for j = 1, k do open[j] = ARGV[at + 2 + j] end
    state.open = open
  elseif role == 'tool' then
    local i = index_of(state.open, answered)
    if i then table.remove(state.open, i) end
  else
    state.open = NO_CALLS
  end
  state.role = role
  return at + 3 + k
end

-- Walk the batch's role items from `state`; returns nil or {code, index (0-based), reason}.
local function advance_all(state, batch, check)
  local at = batch.roles
  for i = 1, batch.n do
    local err
    at, err = advance(state, at, check)
    if not at then return {err[1], i - 1, err[2]} end
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
