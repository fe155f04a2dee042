-- Noticing a rewrite that parts a tool call from its result.

-- The first of the calls `open` leaves unanswered that `before` did not: a call a
-- rewrite separated from its result, which it had. Nil when there is none.
local function lost_result(open, before)
  if #open == 0 then return nil end
  local was = {}
  for _, id in ipairs(before) do was[id] = true end
  for _, id in ipairs(open) do
    if not was[id] then return id end
  end
  return nil
end
