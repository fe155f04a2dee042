-- The role-order and tool-pairing rules, walked over role items.
--- @include "meta"

-- The ids of `open` still unanswered (walk marks an answered one false).
local function unanswered(open)
  local rest = {}
  for x = 1, #open do
    if open[x] then rest[#rest + 1] = open[x] end
  end
  return rest
end

-- Walk n role items from items[at] (ARGV, or a table laid out alike), one per message, sized by role:
--   user | system          the role alone
--   tool <id>              and the call id it answers
--   assistant <k> <ids>    and its k tool call ids
-- from the state (role, open); each item is checked against the strict rules when
-- `check` is true, against the lenient ones when 'lenient' (a user message after anything,
-- an assistant message after anything but nothing or a system message; the rest as strict:
-- redis_history/roles.py), or only against tool pairing when 'pairing' (summaries, whose
-- roles lead whatever they are). Returns the last role, the open call ids and whether
-- they changed; or nil and {code, index (0-based), reason} at the first violation.
-- Linear in the items: a result finds its call through a table of the open ids' positions.
local function walk(role, open, items, at, n, check)
  local ordered, lenient = check == true, check == 'lenient'
  local changed, left, slot = false, #open, nil
  for i = 0, n - 1 do
    local prev, answered, j, k = role, nil, nil, 0
    role = items[at]
    local ids = at + 2
    if role == 'tool' then
      answered, at = items[at + 1], at + 2
      if left > 0 then
        if not slot then
          slot = {}
          for x = #open, 1, -1 do
            if open[x] then slot[open[x]] = x end
          end
        end
        j = slot[answered]
      end
    elseif role == 'assistant' then
      k = tonumber(items[at + 1])
      at = ids + k
    else
      at = at + 1
    end
    if check then
      local code, why
      if role == 'system' and (ordered or lenient) then
        if prev ~= '' then code, why = ROLE_ORDER, 'a system message may only come first, not after ' .. prev end
      elseif role == 'tool' then
        if not j then
          code, why = TOOL_PAIRING, 'tool result for ' .. answered .. ' answers no open tool call'
        end
      elseif role == 'user' or role == 'assistant' or role == 'system' then
        if left > 0 then
          code, why = TOOL_PAIRING, role .. ' message while tool calls are unanswered: ' .. table.concat(unanswered(open), ', ')
        elseif ordered and role == 'user' and not (prev == '' or prev == 'system' or prev == 'assistant') then
          code, why = ROLE_ORDER, 'a user message may not follow ' .. prev
        elseif ordered and role == 'assistant' and not (prev == 'user' or prev == 'tool') then
          code, why = ROLE_ORDER, 'an assistant message may not follow ' .. (prev == '' and 'nothing' or prev)
        elseif lenient and role == 'assistant' and (prev == '' or prev == 'system') then
          code, why = ROLE_ORDER, 'an assistant message may not follow ' .. (prev == '' and 'nothing' or prev)
        end
      else
        code, why = ROLE_ORDER, 'unknown role ' .. tostring(role)
      end
      if code then return nil, {code, i, why} end
    end
    if role == 'tool' then
      if j then
        open[j], slot[answered], left, changed = false, nil, left - 1, true
      end
    elseif k > 0 then
      open, slot, left, changed = {}, nil, k, true
      for x = 1, k do open[x] = items[ids + x - 1] end
    elseif #open > 0 then
      open, slot, left, changed = NO_CALLS, nil, 0, true
    end
  end
  if left < #open then open = unanswered(open) end
  return role, open, changed
end
