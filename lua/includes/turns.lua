-- Turn state read from stored envelopes (truncate, rollback).
--- @include "meta"
--- @include "limits"
--- @include "message"

-- The turn state after the first `index` messages: the last role, and the calls
-- of the latest assistant that the tool results after it leave unanswered; or
-- nil and {CORRUPT, index, reason}, or {LIMIT, ...} past MAX_READ_BYTES.
local function state_before(msgs, index)
  local role, open, answered, bytes = '', {}, {}, 0
  for i = index - 1, 0, -1 do
    local envelope = redis.call('LINDEX', msgs, i)
    bytes = bytes + #(envelope or '')
    if bytes > MAX_READ_BYTES then
      return nil, {LIMIT, i, 'the tool results before message ' .. index .. ' hold more than ' .. MAX_READ_BYTES .. ' bytes'}
    end
    local m = message_of(envelope)
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
