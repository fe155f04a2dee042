-- A batch of messages in ARGV, as codec.batch_args lays it out, and the role
-- and tool-pairing rules walked over it. Needs "codes" and "meta".

local CHUNK = 1000

-- The batch from ARGV[at]: ttl (ms or 0), tokens (the batch's sum), n, then n
-- envelopes, then n role items (see walk). Returns ttl, tokens, n and the
-- position of the first envelope.
local function read_batch(at)
  return tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), at + 3
end

local function index_of(list, value)
  for i = 1, #list do
    if list[i] == value then return i end
  end
  return nil
end

-- Walk n role items from ARGV[at], one per message, sized by role:
--   user | system          the role alone
--   tool <id>              and the call id it answers
--   assistant <k> <ids>    and its k tool call ids
-- from the state (role, open); each item is checked against the rules when
-- `check`. Returns the last role, the open call ids and whether they changed;
-- or nil and {code, index (0-based), reason} at the first violation.
local function walk(role, open, at, n, check)
  local changed = false
  for i = 0, n - 1 do
    local prev, answered, k = role, nil, 0
    role = ARGV[at]
    local ids = at + 2
    if role == 'tool' then
      answered, at = ARGV[at + 1], at + 2
    elseif role == 'assistant' then
      k = tonumber(ARGV[at + 1])
      at = ids + k
    else
      at = at + 1
    end
    if check then
      local code, why
      if role == 'system' then
        if prev ~= '' then code, why = ROLE_ORDER, 'a system message may only come first, not after ' .. prev end
      elseif role == 'tool' then
        if not index_of(open, answered) then
          code, why = TOOL_PAIRING, 'tool result for ' .. answered .. ' answers no open tool call'
        end
      elseif role == 'user' or role == 'assistant' then
        if #open > 0 then
          code, why = TOOL_PAIRING, role .. ' message while tool calls are unanswered: ' .. table.concat(open, ', ')
        elseif role == 'user' and not (prev == '' or prev == 'system' or prev == 'assistant') then
          code, why = ROLE_ORDER, 'a user message may not follow ' .. prev
        elseif role == 'assistant' and not (prev == 'user' or prev == 'tool') then
          code, why = ROLE_ORDER, 'an assistant message may not follow ' .. (prev == '' and 'nothing' or prev)
        end
      else
        code, why = ROLE_ORDER, 'unknown role ' .. tostring(role)
      end
      if code then return nil, {code, i, why} end
    end
    if role == 'tool' then
      local j = index_of(open, answered)
      if j then
        table.remove(open, j)
        changed = true
      end
    elseif k > 0 then
      open, changed = {}, true
      for j = 1, k do open[j] = ARGV[ids + j - 1] end
    elseif #open > 0 then
      open, changed = NO_CALLS, true
    end
  end
  return role, open, changed
end

-- Push values[first..last] in chunks; returns the list's length after the last push (nil if none).
local function push_all(command, key, values, first, last)
  if first == last then return redis.call(command, key, values[first]) end
  local i, length = first, nil
  while i <= last do
    local j = math.min(i + CHUNK - 1, last)
    length = redis.call(command, key, unpack(values, i, j))
    i = j + 1
  end
  return length
end
