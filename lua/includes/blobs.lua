-- Blobs: inline data of content parts kept outside the list (redis_history/store/blobs.py),
-- as meta hash fields: 'blob:<digest>' the data, 'ref:<digest>' its count record
-- '<live>,<archived>,<bytes>' (the entries of the list and of the archive that name it),
-- 'refs:<xy>' the digests (32 hex each) of the counted pieces whose digest starts with xy,
-- 'blobs' the bytes of all pieces, 'cblobs' and 'cpieces' the bytes and number of the
-- counted ones. An envelope names its pieces in its head ('"b":"<digest><digest>..."'), so
-- a rewrite counts down what it drops without decoding a message (lua/includes/tally.lua);
-- a piece no entry names any more is deleted by the write that drops its last one. A piece
-- stored before pieces were counted ('blob:' without 'ref:') is pinned: entries written then
-- name it without a head, so it is never counted down, and leaves with the conversation.
-- A write sends its pieces in ARGV as k, then k triples: digest, the entries of the write
-- naming it, data.
--- @include "codes"
--- @include "limits"

local FIELDS = 1000  -- fields one HMGET, HSET or HDEL takes (Lua unpacks at most 8000 values)

-- `command` on meta with values[1..#values] (field names, or names and values), FIELDS at a
-- time; the replies' values, in order.
local function each_chunk(command, meta, values)
  if #values == 0 then return values end
  if #values <= FIELDS then return redis.call(command, meta, unpack(values)) end
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
-- `live` and `archived` (or nil) are the changes of the counts by digest (entries dropped
-- from the list, moved to the archive, capped away), the section at ARGV[at] (none when `at`
-- is nil) adds its pieces' entries to the list, and `whole` drops the whole list first
-- (every count of the list goes to 0). Returns the plan for write_pieces (`after`: the
-- position after the section); or, when `check`, nil and a refusal when the conversation
-- would keep more than MAX_BLOB_TOTAL bytes or MAX_BLOBS counted pieces. Its work: nothing
-- when no piece is touched; else one HMGET of the records and the sums (per FIELDS pieces
-- touched: every counted one when `whole`, after an HMGET of the 256 lists), one of the
-- lists a piece comes into or goes from, and an HEXISTS per new piece only where pieces
-- stored before they were counted may be (blobs > cblobs). A record that is not one (edited
-- by hand) is left alone, as a pinned piece is.
local function settle(meta, live, archived, at, whole, check)
  local k = at and tonumber(ARGV[at]) or 0
  local after = at and at + 1 + 3 * k
  if k == 0 and not whole and not (live and next(live)) and not (archived and next(archived)) then
    return {after = after}
  end
  local plan = {after = after, added = 0, freed = 0, held = 0, counted = 0, pieces = 0,
                sets = false, dead = false, new = false, lists = false}
  -- section: digest -> its position in ARGV, or false for a piece only dropped or moved
  local section, names = {}, {}
  for i = 1, k do
    local p = at + 3 * i - 2
    section[ARGV[p]], names[i] = p, ARGV[p]
  end
  for name in pairs(live or section) do
    if section[name] == nil then section[name], names[#names + 1] = false, name end
  end
  for name in pairs(archived or section) do
    if section[name] == nil then section[name], names[#names + 1] = false, name end
  end
  if whole then
    local lists = {}
    for i = 0, 255 do lists[i + 1] = string.format('refs:%02x', i) end
    plan.lists = {}
    for i, list in ipairs(redis.call('HMGET', meta, unpack(lists))) do
      if list then
        plan.lists[lists[i]] = list
        for j = 1, #list - 31, 32 do
          local name = string.sub(list, j, j + 31)
          if section[name] == nil then section[name], names[#names + 1] = false, name end
        end
      end
    end
  end
  if #names == 0 then return plan end
  local fields = {'blobs', 'cblobs', 'cpieces'}
  for i, name in ipairs(names) do fields[i + 3] = 'ref:' .. name end
  local values = each_chunk('HMGET', meta, fields)
  local held, counted = tonumber(values[1]) or 0, tonumber(values[2]) or 0
  local sets, dead, fresh = {}, {}, {}
  plan.sets, plan.dead, plan.new = sets, dead, fresh
  plan.held, plan.counted, plan.pieces = held, counted, tonumber(values[3]) or 0
  for i, name in ipairs(names) do
    local p, field, record = section[name], fields[i + 3], values[i + 3]
    local l, a, size
    if record then l, a, size = string.match(record, '^(%d+),(%d+),(%d+)$') end
    if l then
      l = (whole and 0 or tonumber(l)) + (live and live[name] or 0) + (p and tonumber(ARGV[p + 1]) or 0)
      a = tonumber(a) + (archived and archived[name] or 0)
      if l <= 0 and a <= 0 then
        dead[#dead + 1], plan.freed = name, plan.freed + tonumber(size)
      else
        local now = math.max(l, 0) .. ',' .. math.max(a, 0) .. ',' .. size
        if now ~= record then sets[#sets + 1], sets[#sets + 2] = field, now end
      end
    elseif p and not record and (held <= counted or redis.call('HEXISTS', meta, 'blob:' .. name) == 0) then
      local data = ARGV[p + 2]
      sets[#sets + 1], sets[#sets + 2] = 'blob:' .. name, data
      sets[#sets + 1], sets[#sets + 2] = field, ARGV[p + 1] .. ',0,' .. #data
      fresh[#fresh + 1], plan.added = name, plan.added + #data
    end  -- else pinned: stored before pieces were counted (or its record edited by hand)
  end
  if check and #fresh > 0 then
    if held - plan.freed + plan.added > MAX_BLOB_TOTAL then
      return nil, {LIMIT, -1, 'the conversation would keep more than ' .. MAX_BLOB_TOTAL .. ' bytes of inline data'}
    end
    if plan.pieces - #dead + #fresh > MAX_BLOBS then
      return nil, {LIMIT, -1, 'the conversation would keep more than ' .. MAX_BLOBS .. ' pieces of inline data'}
    end
  end
  return plan
end

-- Carry out settle's plan: store the new pieces and write the changed records, delete the
-- pieces no entry names any more, and keep the lists ('refs:<xy>') and the sums ('blobs',
-- 'cblobs', 'cpieces') with them: an HSET (per FIELDS values), and an HMGET of the lists
-- and an HDEL (per FIELDS fields) when a piece comes or goes.
local function write_pieces(meta, plan)
  local sets, dead, new = plan.sets, plan.dead, plan.new
  if not sets then return end
  if #dead + #new > 0 then
    local lists, fields, gone, touched = plan.lists, {}, {}, {}
    for _, name in ipairs(dead) do
      gone[name] = true
      fields[#fields + 1], fields[#fields + 2] = 'blob:' .. name, 'ref:' .. name
      touched['refs:' .. string.sub(name, 1, 2)] = true
    end
    for _, name in ipairs(new) do touched['refs:' .. string.sub(name, 1, 2)] = true end
    if not lists then
      local read = {}
      for list in pairs(touched) do read[#read + 1] = list end
      lists = {}
      for i, list in ipairs(redis.call('HMGET', meta, unpack(read))) do lists[read[i]] = list end
    end
    for list in pairs(touched) do
      local old, keep = lists[list] or '', {}
      if #dead == 0 then
        keep[1] = old
      else
        for i = 1, #old - 31, 32 do
          local name = string.sub(old, i, i + 31)
          if not gone[name] then keep[#keep + 1] = name end
        end
      end
      touched[list] = keep
    end
    for _, name in ipairs(new) do
      local keep = touched['refs:' .. string.sub(name, 1, 2)]
      keep[#keep + 1] = name
    end
    for list, keep in pairs(touched) do
      local value = table.concat(keep)
      if value == '' then fields[#fields + 1] = list else sets[#sets + 1], sets[#sets + 2] = list, value end
    end
    local change = plan.added - plan.freed
    local held, counted, pieces = plan.held + change, plan.counted + change, plan.pieces + #new - #dead
    if held > 0 then sets[#sets + 1], sets[#sets + 2] = 'blobs', held else fields[#fields + 1] = 'blobs' end
    if counted > 0 then sets[#sets + 1], sets[#sets + 2] = 'cblobs', counted else fields[#fields + 1] = 'cblobs' end
    if pieces > 0 then sets[#sets + 1], sets[#sets + 2] = 'cpieces', pieces else fields[#fields + 1] = 'cpieces' end
    each_chunk('HDEL', meta, fields)
  end
  each_chunk('HSET', meta, sets)
end
