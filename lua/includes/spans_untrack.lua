-- Appends a splice or a replace takes out of the list (spans.lua).
--- @include "spans"

-- After a splice of the first `below` messages (math.huge: a replace of them all): an append
-- with a message among them is no longer tracked (0), and stays applied. The records to
-- write, or nil (respan).
local function untrack_spans(meta, length, below)
  return respan(meta, length, function(live, stop, cut)
    if live == 0 then return false end
    if stop - live >= below then return live + cut end
    return cut
  end)
end
