-- Turn state read from stored envelopes (truncate, rollback).
--- @include "meta"
--- @include "limits"
--- @include "message"

-- The turn state after the first `index` messages: the last role, and the calls
-- of the latest assistant that the tool results after it leave unanswered; or
-- nil and {CORRUPT, index, reason}, or {LIMIT, ...} past MAX_REWRITE entries or
-- MAX_READ_BYTES. Read back a few entries at a time (as many as the budget left allows
-- entries of the largest size), from the entry before `index` to the latest that is
-- not a tool result.
local function state_before(msgs, index)
  local role, open, answered, bytes, seen = '', {}, {}, 0, 0
  local i = index - 1
  while i >= 0 do
    local from = math.max(0, i - math.max(1, math.floor((MAX_READ_BYTES - bytes) / MAX_ENTRY_BYTES)) + 1)
    local chunk = redis.call('LRANGE', msgs, from, i)
    for c = #chunk, 1, -1 do
      local at = from + c - 1
      bytes, seen = bytes + #chunk[c], seen + 1
      if bytes > MAX_READ_BYTES or seen > MAX_REWRITE then
        return nil, {LIMIT, at, 'the tool results before message ' .. index .. ' are more than ' .. MAX_REWRITE .. ' messages or ' .. MAX_READ_BYTES .. ' bytes'}
      end
      local m = message_of(chunk[c])
      if not m then return nil, {CORRUPT, at, 'stored envelope is not a message'} end
      if role == '' then role = m.role end
      if m.role ~= 'tool' then
        if m.role == 'assistant' then
          for _, call in ipairs(m.tool_calls) do
            if not answered[call.id] then open[#open + 1] = call.id end
          end
        end
        return role, open
      end
      answered[m.tool_call_id] = true
    end
    i = from - 1
  end
  return role, open
end
