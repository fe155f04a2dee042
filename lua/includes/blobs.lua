-- Blobs: inline data of content parts kept outside the list (redis_history/store/blobs.py),
-- as meta hash fields: 'blob:<digest>' the data, 'ref:<digest>' its count record
-- '<live>,<archived>,<bytes>' (the entries of the list and of the archive that name it),
-- 'refs' the digests of the counted pieces (32 hex each), 'blobs' the bytes of all pieces
-- and 'cblobs' of the counted ones. An envelope names its pieces in its head
-- ('"b":"<digest><digest>..."'), so a rewrite counts down what it drops without decoding a
-- message (lua/includes/tally.lua); a piece no entry names any more is deleted by the write
-- that drops its last one. A piece stored before pieces were counted ('blob:' without
-- 'ref:') is pinned: entries written then name it without a head, so it is never counted
-- down, and leaves with the conversation.
-- A write sends its pieces in ARGV as k, then k triples: digest, the entries of the write
-- naming it, data.
--- @include "codes"
--- @include "limits"

local FIELDS = 1000  -- fields one HMGET, HSET or HDEL takes (Lua unpacks at most 8000 values)

-- `command` on meta with values[1..#values] (field names, or names and values), FIELDS at a
-- time; the replies' values, in order.
local function each_chunk(command, meta, values)
  local out, i = {}, 1
  while i <= #values do
    local j = math.min(#values, i + FIELDS - 1)
    local reply = redis.call(command, meta, unpack(values, i, j))
    if type(reply) == 'table' then
      for _, value in ipairs(reply) do out[#out + 1] = value end
    end
    i = j + 1
  end
  return out
end

-- What a write does to the stored pieces, read and decided without writing anything:
-- `live` and `archived` are the changes of the counts by digest (entries dropped from the
-- list, moved to the archive, capped away), the section at ARGV[at] (none when `at` is nil)
-- adds its pieces' entries to the list, and `whole` drops the whole list first (every count
-- of the list goes to 0). Returns the plan for write_pieces (`after`: the position after the
-- section); or, when `check`, nil and a refusal when the conversation would keep more than
-- MAX_BLOB_TOTAL bytes or MAX_BLOBS counted pieces. Its work: an HMGET per FIELDS pieces
-- touched (every counted one when `whole`), 'refs' and the sums read once, and an HEXISTS
-- per new piece only where pieces stored before they were counted may be (blobs > cblobs).
-- A record that is not one (edited by hand) is left alone, as a pinned piece is.
local function settle(meta, live, archived, at, whole, check)
  local plan = {sets = {}, dead = {}, new = {}, added = 0, freed = 0}
  local section, names, seen, k = {}, {}, {}, at and tonumber(ARGV[at]) or 0
  if at then plan.after = at + 1 + 3 * k end
  local function touch(name)
    if not seen[name] then seen[name], names[#names + 1] = true, name end
  end
  for i = 1, k do
    local p = at + 3 * i - 2
    section[ARGV[p]] = p
    touch(ARGV[p])
  end
  for name in pairs(live) do touch(name) end
  for name in pairs(archived) do touch(name) end
  if whole then
    plan.dir = redis.call('HGET', meta, 'refs') or ''
    for i = 1, #plan.dir - 31, 32 do touch(string.sub(plan.dir, i, i + 31)) end
  end
  if #names == 0 then return plan end
  local sums = redis.call('HMGET', meta, 'blobs', 'cblobs')
  local held, counted = tonumber(sums[1]) or 0, tonumber(sums[2]) or 0
  local fields = {}
  for i, name in ipairs(names) do fields[i] = 'ref:' .. name end
  local records = each_chunk('HMGET', meta, fields)
  local sets, fresh = plan.sets, plan.new
  for i, name in ipairs(names) do
    local p, record = section[name], records[i]
    local l, a, size
    if record then l, a, size = string.match(record, '^(%d+),(%d+),(%d+)$') end
    if l then
      l = (whole and 0 or tonumber(l)) + (live[name] or 0) + (p and tonumber(ARGV[p + 1]) or 0)
      a = tonumber(a) + (archived[name] or 0)
      if l <= 0 and a <= 0 then
        plan.dead[#plan.dead + 1], plan.freed = name, plan.freed + tonumber(size)
      else
        local now = math.max(l, 0) .. ',' .. math.max(a, 0) .. ',' .. size
        if now ~= record then sets[#sets + 1], sets[#sets + 2] = fields[i], now end
      end
    elseif p and not record and (held <= counted or redis.call('HEXISTS', meta, 'blob:' .. name) == 0) then
      local data = ARGV[p + 2]
      sets[#sets + 1], sets[#sets + 2] = 'blob:' .. name, data
      sets[#sets + 1], sets[#sets + 2] = fields[i], ARGV[p + 1] .. ',0,' .. #data
      fresh[#fresh + 1], plan.added = name, plan.added + #data
    end  -- else pinned: stored before pieces were counted (or its record edited by hand)
  end
  if #plan.dead + #fresh > 0 and not plan.dir then
    plan.dir = redis.call('HGET', meta, 'refs') or ''
  end
  if check and #fresh > 0 then
    if held - plan.freed + plan.added > MAX_BLOB_TOTAL then
      return nil, {LIMIT, -1, 'the conversation would keep more than ' .. MAX_BLOB_TOTAL .. ' bytes of inline data'}
    end
    if #plan.dir / 32 - #plan.dead + #fresh > MAX_BLOBS then
      return nil, {LIMIT, -1, 'the conversation would keep more than ' .. MAX_BLOBS .. ' pieces of inline data'}
    end
  end
  return plan
end

-- Carry out settle's plan: store the new pieces and write the changed records, delete the
-- pieces no entry names any more, and keep 'refs', 'blobs' (the bytes of every piece) and
-- 'cblobs' (of the counted ones) with them.
local function write_pieces(meta, plan)
  each_chunk('HSET', meta, plan.sets)
  if #plan.dead + #plan.new == 0 then return end
  local kept = {}
  if #plan.dead > 0 then
    local gone, fields = {}, {}
    for _, name in ipairs(plan.dead) do
      gone[name] = true
      fields[#fields + 1], fields[#fields + 2] = 'blob:' .. name, 'ref:' .. name
    end
    each_chunk('HDEL', meta, fields)
    for i = 1, #plan.dir - 31, 32 do
      local name = string.sub(plan.dir, i, i + 31)
      if not gone[name] then kept[#kept + 1] = name end
    end
  else
    kept[1] = plan.dir
  end
  for _, name in ipairs(plan.new) do kept[#kept + 1] = name end
  local dir = table.concat(kept)
  if dir == '' then redis.call('HDEL', meta, 'refs') else redis.call('HSET', meta, 'refs', dir) end
  for _, field in ipairs({'blobs', 'cblobs'}) do
    if redis.call('HINCRBY', meta, field, plan.added - plan.freed) <= 0 then
      redis.call('HDEL', meta, field)
    end
  end
end
