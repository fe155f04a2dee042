--[[
splice_prefix: replace the oldest messages with a summary, keeping everything
after them (including messages appended while the summary was computed), and
move the originals to the archive. Resets the token baseline.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST of replaced envelopes, oldest first
KEYS[4] lock     STRING compaction lock
ARGV[1] drop     messages to drop (>= 0)
ARGV[2] token    the compaction lock token to fence on, or '' for none
ARGV[3] expect   1 if the ids of the summarized prefix follow, else 0
ARGV[4..] ids    with expect: the `drop` ids the caller summarized, oldest first
ARGV[...] batch  the summaries: ttl, tokens, n, n envelopes, n role items (see read_batch)

Returns the number dropped, or {code, index, reason} having written nothing:
3 stale prefix, 4 lock lost, 5 corrupt data.
]]
--- @include "codes"
--- @include "meta"
--- @include "ttl"
--- @include "rewrite"
--- @include "batch"
--- @include "envelopes"

local msgs, meta, archive, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local drop, token, expect = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1'
local ttl, tokens, count, first = read_batch(expect and 4 + drop or 4)

if token ~= '' and redis.call('GET', lock) ~= token then
  return {LOCK_LOST, -1, 'the compaction lock is not held by this token'}
end
local total, role, open = load_meta(meta)
if not total then return {CORRUPT, -1, role} end
redis.call('LLEN', archive)

local length = redis.call('LLEN', msgs)
local n = math.min(drop, length)
if expect and drop ~= n then
  return {STALE, -1, 'the conversation has ' .. length .. ' messages, fewer than the ' .. drop .. ' summarized'}
end
if n <= 0 then return 0 end

local dropped = redis.call('LRANGE', msgs, 0, n - 1)
if expect then
  for i, envelope in ipairs(dropped) do
    local ok, decoded = pcall(cjson.decode, envelope)
    if not ok or type(decoded) ~= 'table' or type(decoded.m) ~= 'table' then
      return {CORRUPT, i - 1, 'stored envelope is not JSON'}
    end
    local id = ARGV[3 + i]
    if decoded.m.id ~= id then
      return {STALE, i - 1, 'message ' .. tostring(decoded.m.id) .. ' is where ' .. id .. ' was summarized'}
    end
  end
end
local gone, bad = sum_tokens(dropped)
if not gone then return {CORRUPT, bad, 'stored envelope has no token count'} end

push_all('RPUSH', archive, dropped, 1, #dropped)
redis.call('LTRIM', msgs, n, -1)
local reversed = {}
for i = first + count - 1, first, -1 do reversed[#reversed + 1] = ARGV[i] end
push_all('LPUSH', msgs, reversed, 1, #reversed)

-- Summaries carry no tool calls, so the turn state is theirs only when nothing is left after them.
if n == length then
  role, open = walk('', NO_CALLS, first + count, count, false)
end
rewritten(meta, total - gone + tokens, role, open)
refresh_ttl(ttl, msgs, meta, archive)
return n
