-- The layout of the records of recent writes (records.lua; append_small-4.lua reads and
-- writes them inline). The last OPS_KEPT writes of each kind are recorded, oldest first:
-- appends in the field 'opa' as their 6-byte operation tokens; every other write in
-- 'ops', its token then its result as a 4-byte integer (10 bytes). An append's replay
-- needs no result, and every byte a script reads and writes costs.
local OPS_KEPT, TOKEN_SIZE, RESULT_SIZE = 32, 6, 4
local APPENDS, WRITES = 'opa', 'ops'
