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
ARGV[3] expect   1 if the ids of the summarized prefix follow the batch, else 0
ARGV[4..] batch  the summaries: exact, ttl, tokens, n, n envelopes, role items (see read_batch)
ARGV[...] ids    with expect: the `drop` ids the caller summarized, oldest first

Returns {0, dropped, version}, or {code, index, reason} having written nothing:
3 stale prefix, 4 lock lost, 5 corrupt data.
]]
--- @include "history"

local msgs, meta, archive, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local drop, token = tonumber(ARGV[1]), ARGV[2]
local batch, after = read_batch(4)
local ids = nil
if ARGV[3] == '1' then
  ids = {}
  for i = 1, drop do ids[i] = ARGV[after + i - 1] end
end

if token ~= '' and redis.call('GET', lock) ~= token then
  return {LOCK_LOST, -1, 'the compaction lock is not held by this token'}
end
local state, why = load_meta(meta)
if not state then return {CORRUPT, -1, why} end
redis.call('LLEN', archive)

local length = redis.call('LLEN', msgs)
local n = math.min(drop, length)
if ids and #ids ~= n then
  return {STALE, -1, 'the conversation has ' .. length .. ' messages, fewer than the ' .. #ids .. ' summarized'}
end
if n <= 0 then return {OK, 0, state.version} end

local dropped = redis.call('LRANGE', msgs, 0, n - 1)
if ids then
  for i, envelope in ipairs(dropped) do
    local ok, decoded = pcall(cjson.decode, envelope)
    if not ok or type(decoded) ~= 'table' or type(decoded.m) ~= 'table' then
      return {CORRUPT, i - 1, 'stored envelope is not JSON'}
    end
    if decoded.m.id ~= ids[i] then
      return {STALE, i - 1, 'message ' .. tostring(decoded.m.id) .. ' is where ' .. ids[i] .. ' was summarized'}
    end
  end
end
local gone, gone_approx = sum_tokens(dropped)
if not gone then return {CORRUPT, gone_approx, 'stored envelope has no token count'} end

local added = batch.tokens
push_all('RPUSH', archive, dropped, 1, #dropped)
redis.call('LTRIM', msgs, n, -1)
local reversed = {}
for i = batch.last, batch.first, -1 do reversed[#reversed + 1] = ARGV[i] end
push_all('LPUSH', msgs, reversed, 1, #reversed)

if n == length then
  state.role, state.open = '', {}
  advance_all(state, batch, false)
end
redis.call('HSET', meta, 'role', state.role, 'open', encode_open(state.open),
  'total', state.total - gone + added,
  'approx', state.approx - gone_approx + (batch.exact and 0 or added),
  'since', 0, 'version', state.version + 1)
redis.call('HDEL', meta, 'baseline')
refresh_ttl(batch.ttl, msgs, meta, archive)
return {OK, n, state.version + 1}
