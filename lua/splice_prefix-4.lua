--[[
splice_prefix: replace the oldest messages with a summary, keeping everything
after them (including messages appended while the summary was computed), and
move the originals to the archive. Resets the token baseline.

KEYS[1] msgs     LIST of envelopes
KEYS[2] meta     HASH
KEYS[3] archive  LIST of replaced envelopes, oldest first
KEYS[4] lock     STRING compaction lock
ARGV[1] header   JSON {"n": messages to drop, "ids": [expected ids of that prefix] (optional),
                       "tok": lock token (optional: fencing), "x": 1 if exact, "ttl": ms or 0,
                       "m": [summary message headers]}
ARGV[2..] summary envelopes, in order

Returns {0, dropped, version}, or {code, index, reason} having written nothing:
3 stale prefix, 4 lock lost, 5 corrupt data.
]]
--- @include "history"

local msgs, meta, archive, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local header = cjson.decode(ARGV[1])

if header.tok and redis.call('GET', lock) ~= header.tok then
  return {LOCK_LOST, -1, 'the compaction lock is not held by this token'}
end
local state, why = load_meta(meta)
if not state then return {CORRUPT, -1, why} end
redis.call('LLEN', archive)

local length = redis.call('LLEN', msgs)
local n = math.min(header.n, length)
local ids = header.ids
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

local added = header_sums(header.m)
push_all('RPUSH', archive, dropped, 1, #dropped)
redis.call('LTRIM', msgs, n, -1)
local reversed = {}
for i = #ARGV, 2, -1 do reversed[#reversed + 1] = ARGV[i] end
push_all('LPUSH', msgs, reversed, 1, #reversed)

if n == length then
  state.role, state.open = '', {}
  advance_all(state, header.m, false)
end
redis.call('HSET', meta, 'role', state.role, 'open', encode_open(state.open),
  'total', state.total - gone + added,
  'approx', state.approx - gone_approx + (header.x == 1 and 0 or added),
  'since', 0, 'version', state.version + 1)
redis.call('HDEL', meta, 'baseline')
refresh_ttl(header.ttl, msgs, meta, archive)
return {OK, n, state.version + 1}
