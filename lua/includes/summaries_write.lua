-- Writes of the shared summaries hash (see summaries.lua).
--- @include "summaries"

local function summaries_set_live(summaries, live)
  if #live == 0 then
    redis.call('HDEL', summaries, 'live')
  else
    redis.call('HSET', summaries, 'live', cjson.encode(live))
  end
end

-- Remove summary `seq`; its messages still marked as its own become `mark`, or free
-- again when `mark` is false.
local function summaries_drop(summaries, seq, mark)
  local raw = redis.call('HGET', summaries, 's:' .. seq)
  if not raw then return end
  local record = cjson.decode(raw)
  for _, id in ipairs(record.ids) do
    local field = 'i:' .. id
    if redis.call('HGET', summaries, field) == 's' .. seq then
      if mark then
        redis.call('HSET', summaries, field, mark)
      else
        redis.call('HDEL', summaries, field)
      end
    end
  end
  redis.call('HDEL', summaries, 's:' .. seq, 't:' .. record.token)
end
