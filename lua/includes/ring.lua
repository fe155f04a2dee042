-- The layout of the records of recent writes (records.lua; append_small-4.lua reads and
-- writes them inline; spans.lua keeps the appends' spans). The last OPS_KEPT writes of each
-- kind, at least, are recorded, oldest first: appends in the field 'opa', 8 bytes each,
-- their operation token then their span, a 2-byte integer: how many of the batch's
-- messages the list still holds (below SPAN_CUT; 0 once a splice or a replace took them out
-- of its reach) plus SPAN_CUT once a rollback or a truncate removed part of the batch; every
-- other write in 'ops', its token then its result as a 4-byte integer (10 bytes). An
-- append's replay needs no result, and every byte a script reads and writes costs: Lua
-- hashes each string it makes, whole. So appends are dropped APPENDS_DROPPED at a time, the
-- oldest, when one more would pass OPS_KEPT + APPENDS_DROPPED - 1: an append copies the
-- ring into a new string once, not twice, seven times out of eight.
local OPS_KEPT, TOKEN_SIZE, RESULT_SIZE, APPEND_SIZE, APPENDS_DROPPED = 32, 6, 4, 8, 8
local SPAN_CUT = 32768  -- the high bit of the span's first byte (128)
local APPENDS, WRITES = 'opa', 'ops'
local PARTLY_REMOVED = 'a rollback or a truncate removed part of this batch since it was appended, so appending it again would repeat the rest: append the removed messages as a new batch'
