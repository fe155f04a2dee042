-- The spans of the recent appends (ring.lua) through a rewrite. The appends whose span is
-- live (not 0) are the newest recorded, and their spans tile the tail of the list in their
-- order: the newest's messages end the list, each older one's end where the next one's
-- begin. An append records its batch as the newest, at the end of the list; dropping the
-- oldest records keeps the tiling, and every rewrite of the list keeps it through these.
--- @include "ring"

-- The append records rewritten from the newest, whose live span (if any) ends at position
-- `stop` of the list as it was `length` long before the rewrite: `span(live, stop, cut)`
-- gives the record's new span (its live count, plus SPAN_CUT when cut), nil to forget the
-- append, or false to keep it and every older record as they are. Returns the records to
-- write (rewritten() writes them with the rest), or nil when they stay as they are.
local function respan(meta, length, span)
  local records = redis.call('HGET', meta, APPENDS)
  if not records then return nil end
  local newer, stop, i = {}, length, #records - APPEND_SIZE + 1
  while i >= 1 do
    local hi, lo = string.byte(records, i + TOKEN_SIZE, i + APPEND_SIZE - 1)
    local live = (hi * 256 + lo) % SPAN_CUT
    local new = span(live, stop, hi * 256 + lo - live)
    if new == false then break end
    if new then
      newer[#newer + 1] = string.sub(records, i, i + TOKEN_SIZE - 1) .. string.char(math.floor(new / 256), new % 256)
    end
    stop, i = stop - live, i - APPEND_SIZE
  end
  local out = {string.sub(records, 1, i + APPEND_SIZE - 1)}
  for k = #newer, 1, -1 do out[#out + 1] = newer[k] end
  out = table.concat(out)
  if out == records then return nil end
  return out
end
