-- Writes of the shared summaries hash (see summaries.lua).
--- @include "summaries"

local function summaries_set_live(summaries, live)
  if #live == 0 then
    redis.call('HDEL', summaries, 'live')
  else
    redis.call('HSET', summaries, 'live', table.concat(live, ' '))
  end
end

-- Remove summary `seq` (a kept one) in one HDEL; with `free`, its messages too, which are
-- free to claim again then (all still hold its seq: a summarized message is never claimed).
-- At most 4 + MAX_SUMMARY_MESSAGES fields.
local function summaries_drop(summaries, seq, free)
  local fields = {'s:' .. seq, 'r:' .. seq, 'd:' .. seq}
  if redis.call('HSTRLEN', summaries, 'r:' .. seq) <= MAX_COVER_BYTES then
    local cover = redis.call('HGET', summaries, 'r:' .. seq) or ''
    local token = string.match(cover, '^%d+:%x+:(%w+):')
    if token then fields[#fields + 1] = 't:' .. token end
  end
  if free and redis.call('HSTRLEN', summaries, 'd:' .. seq) <= MAX_SUMMARY_MESSAGES * DIGEST then
    local digests = redis.call('HGET', summaries, 'd:' .. seq) or ''
    for at = 1, #digests - DIGEST + 1, DIGEST do
      fields[#fields + 1] = 'i:' .. string.sub(digests, at, at + DIGEST - 1)
    end
  end
  redis.call('HDEL', summaries, unpack(fields))
end
