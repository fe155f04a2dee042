-- Writes of the shared summaries hash (see summaries.lua).
--- @include "summaries"

local function summaries_set_live(summaries, live)
  if #live == 0 then
    redis.call('HDEL', summaries, 'live')
  else
    redis.call('HSET', summaries, 'live', table.concat(live, ' '))
  end
end

-- Remove summary `seq` (a kept one) in one HDEL; with `free` (a stale one), its messages are
-- free to claim again, by one mark for them all (f:<seq>).
local function summaries_drop(summaries, seq, free)
  local fields = {'s:' .. seq, 'r:' .. seq}
  if redis.call('HSTRLEN', summaries, 'r:' .. seq) <= MAX_COVER_BYTES then
    local cover = redis.call('HGET', summaries, 'r:' .. seq) or ''
    local token = string.match(cover, '^%d+:%x+:(%w+):')
    if token then fields[#fields + 1] = 't:' .. token end
  end
  redis.call('HDEL', summaries, unpack(fields))
  if free then redis.call('HSET', summaries, 'f:' .. seq, 1) end
end
