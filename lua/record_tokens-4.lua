--[[
record_tokens: make the real input-token count the LLM reported the baseline;
the tokens appended after it are counted from the current total (the mark).
A conversation that does not exist (never written, or deleted) is left alone; one
that lost its meta hash or its list is refused.

KEYS[1] msgs     LIST (only its TTL is refreshed)
KEYS[2] meta     HASH (baseline, mark, total)
KEYS[3] archive  LIST (only its TTL is refreshed)
KEYS[4] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] tokens   the reported input tokens (>= 0)

Returns 1 when recorded, 0 when there is no conversation, or {5, -1, reason}
having written nothing.
]]
--- @include "meta"
--- @include "ttl"
--- @include "lost"

local msgs, meta, archive, shared = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op = ARGV[1]
local total, refusal, _, ttl, records, exists = read_meta(meta, WRITES)
if not total then return refusal end
local lost = keys_lost(exists, total, redis.call('LLEN', msgs))
if lost then return lost end
if not exists then return 0 end
if replayed(meta, WRITES, records, op) then return 1 end
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))
commit(meta, WRITES, records, op, nil, new_ttl, 'baseline', ARGV[3], 'mark', total)
refresh_ttl(ttl, msgs, meta, archive, shared)
return 1
