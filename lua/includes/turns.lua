-- Turn state rebuilt from stored messages (truncate, rollback).
--- @include "meta"

-- The message in an envelope with the fields the turn rules read checked, or nil.
-- An assistant's tool_calls are left out of the envelope when there are none.
local function message_of(envelope)
  local ok, decoded = pcall(cjson.decode, envelope or '')
  local m = ok and type(decoded) == 'table' and decoded.m
  local role = type(m) == 'table' and m.role
  if not (role == 'user' or role == 'assistant' or role == 'tool' or role == 'system') then
    return nil
  end
  if m.role == 'tool' and type(m.tool_call_id) ~= 'string' then return nil end
  if m.role == 'assistant' then
    if m.tool_calls == nil then m.tool_calls = {} end
    if type(m.tool_calls) ~= 'table' then return nil end
    for _, call in ipairs(m.tool_calls) do
      if type(call) ~= 'table' or type(call.id) ~= 'string' then return nil end
    end
  end
  return m
end

-- The turn state after the first `index` messages: the last role, and the calls
-- of the latest assistant that the tool results after it leave unanswered; or
-- nil and {CORRUPT, index, reason}.
local function state_before(msgs, index)
  local role, open, answered = '', {}, {}
  for i = index - 1, 0, -1 do
    local m = message_of(redis.call('LINDEX', msgs, i))
    if not m then return nil, {CORRUPT, i, 'stored envelope is not a message'} end
    if role == '' then role = m.role end
    if m.role == 'tool' then
      answered[m.tool_call_id] = true
    else
      if m.role == 'assistant' then
        for _, call in ipairs(m.tool_calls) do
          if not answered[call.id] then open[#open + 1] = call.id end
        end
      end
      break
    end
  end
  return role, open
end
