--[[
append: add messages at the tail, all or none, checking role order and tool
pairing against the conversation's stored state. Applied once per op: a retry
of an applied batch (same op) writes nothing and succeeds.

Either the envelopes come in ARGV and the script pushes them, or (`staged`) they
stay out of Lua: the script runs first in a MULTI whose next commands are
`RPUSHX stage <envelopes>` and `RENAME stage msgs`. Approving the batch, it renames
msgs to stage, so the push lands and is renamed back; refusing it (or missing,
after a restart: NOSCRIPT) it leaves no stage, so the push and the rename find
nothing and the transaction writes nothing. A script's arguments cost Redis about
a microsecond per kilobyte in Lua; a plain RPUSHX does not.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH (total, role, open, ttl, and the records of recent appends)
KEYS[3] archive  LIST (only its TTL is refreshed)
KEYS[4] stage    what msgs is renamed to while a staged push lands (never left behind;
                 one found when staging is removed first)
KEYS[5] summaries HASH the HistoryManager's shared summaries (only its TTL is refreshed)
ARGV[1] op       the operation token (derived from the batch's message ids)
ARGV[2] ttl      ms to set as the conversation's TTL, or 0 to keep the stored one
ARGV[3] check    1 to check role order (the strict rules) and tool pairing, l the same by the
                 lenient rules (walk.lua), 0 to only track them
ARGV[4] staged   1 when the envelopes are pushed by the transaction's next command
ARGV[5] span     n, the batch's size, as 2 bytes (big-endian): its record's span (ring.lua)
ARGV[6..] blobs  k, then k triples of digest, the batch's messages naming it, and data:
                 the batch's inline data kept outside the list (see lua/includes/blobs.lua)
ARGV[...] batch  tokens, n, n envelopes unless staged, n role items (see read_batch)

Returns the list's length after the batch; {0, length} when the op was applied before
(a replay: nothing written, and the caller is told so); -1 when staged and the list is empty
(nothing to rename: nothing was written, send the envelopes with the script); or
{code, index, reason} having written nothing: 1 role order, 2 tool pairing, 3 stale (the op
was applied before and a rollback or a truncate removed part of its messages since; one
that removed all of them made the op new again), 5 corrupt meta, or a conversation whose meta hash or list was lost (evicted), 7 over the
conversation's inline data limit.
]]
--- @include "meta"
--- @include "lost"
--- @include "open"
--- @include "ttl"
--- @include "batch"
--- @include "walk"
--- @include "push"
--- @include "blobs"

local msgs, meta, stage, shared = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local op, staged = ARGV[1], ARGV[4] == '1'
-- A stage key outside this transaction is never ours (a crashed client's, an operator's):
-- removed first, so that the transaction's push and rename find nothing unless approved.
if staged then redis.call('DEL', stage) end
local total, role, open, ttl, records, exists = read_meta(meta, APPENDS)
if not total then return role end  -- read_meta's refusal
local done = replayed(meta, APPENDS, records, op)
if done then
  if done < 0 then return {STALE, -1, PARTLY_REMOVED} end
  return {0, redis.call('LLEN', msgs)}
end
local pieces, over = settle(meta, nil, nil, 6, false, true)
if not pieces then return over end  -- over the inline data limits
local tokens, n, first = read_batch(pieces.after)
local new_ttl
ttl, new_ttl = effective_ttl(ttl, tonumber(ARGV[2]))

-- A conversation that lost a key is refused before anything is checked against its state.
local length
if staged or not exists then
  length = redis.call('LLEN', msgs)
  local lost = keys_lost(exists, total, length)
  if lost then return lost end
  if staged and length == 0 then return -1 end
end

local changed
local rules = ARGV[3] == 'l' and 'lenient' or ARGV[3] == '1'
role, open, changed = walk(role, open, ARGV, staged and first or first + n, n, rules)
if not role then  -- walk's refusal, unless the stored state it checked against is lost
  return keys_lost(exists, total, length or redis.call('LLEN', msgs)) or open
end

-- The first write: on a key of the wrong type it fails before anything is written.
if staged then
  redis.call('RENAME', msgs, stage)
  msgs, length = stage, length + n  -- the TTL set on stage comes back with the rename
else
  -- Onto a list the meta hash counts tokens of, RPUSHX: if the list was lost it pushes
  -- nothing (0), and the append is refused having written nothing.
  length = push_all(total > 0 and 'RPUSHX' or 'RPUSH', msgs, ARGV, first, first + n - 1) or 0
  if length == 0 then return keys_lost(exists, total, 0) end
end
write_pieces(meta, pieces)
if changed then
  commit(meta, APPENDS, records, op, ARGV[5], new_ttl, 'role', role, 'total', total + tokens, 'open', encode_open(open))
else
  commit(meta, APPENDS, records, op, ARGV[5], new_ttl, 'role', role, 'total', total + tokens)
end
refresh_ttl(ttl, msgs, meta, KEYS[3], shared)
return length
