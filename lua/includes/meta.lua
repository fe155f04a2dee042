-- The meta hash's token total and turn state.

local NO_CALLS = {}  -- the open call ids of every state without any; never written to

-- The token total, the last role and the open tool call ids (a table); or nil
-- and the reason when a field is not what we wrote.
local function load_meta(meta)
  local f = redis.call('HMGET', meta, 'total', 'role', 'open')
  local total = tonumber(f[1] or 0)
  if not total then return nil, 'meta field total is not a number' end
  local open = NO_CALLS
  if f[3] and f[3] ~= '' then
    local ok, decoded = pcall(cjson.decode, f[3])
    if not ok or type(decoded) ~= 'table' then return nil, 'meta field open is not a JSON array' end
    open = decoded
  end
  return total, f[2] or '', open
end

local function encode_open(open)
  if #open == 0 then return '' end
  return cjson.encode(open)
end
