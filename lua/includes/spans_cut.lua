-- Appends a rollback or a truncate removes (spans.lua).
--- @include "spans"

-- After a rollback or a truncate of a list `length` long, which removed `count(from, to)` of
-- the messages at positions from..to-1 and none below `low`: an append whose messages all
-- went is forgotten, so that appending its batch again appends it; one that lost some is cut.
-- The records to write, or nil (respan).
local function cut_spans(meta, length, low, count)
  return respan(meta, length, function(live, stop, cut)
    if live == 0 or stop <= low then return false end
    local k = count(stop - live, stop)
    if k == live then return nil end
    if k == 0 then return live + cut end
    return live - k + SPAN_CUT
  end)
end
