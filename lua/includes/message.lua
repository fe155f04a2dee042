-- The fields of a stored message the turn rules read, without decoding its text.

-- The JSON string that starts at s[i] (after its opening quote), decoded; nil if none.
local function json_string_at(s, i)
  local j = i
  while true do
    j = string.find(s, '"', j, true)
    if not j then return nil end
    local k = j - 1
    while k >= i and string.byte(s, k) == 92 do k = k - 1 end  -- 92: a backslash
    if (j - 1 - k) % 2 == 0 then break end
    j = j + 1
  end
  local ok, value = pcall(cjson.decode, '"' .. string.sub(s, i, j - 1) .. '"')
  if ok and type(value) == 'string' then return value end
  return nil
end

-- The message in an envelope with the fields the turn rules read (role, tool_call_id,
-- tool_calls with their ids), or nil. Read with patterns, decoding only an assistant's
-- envelope that holds tool calls: a tool result's text, however long, is never decoded.
-- In a message's JSON the fields come in the model's order (id, role, content,
-- tool_calls, tool_call_id, ...), and a quote inside a string is escaped, so the first
-- ,"tool_call_id":" after the role is that field.
local function message_of(envelope)
  if not envelope then return nil end
  local role, after = string.match(envelope, '^{"t":%d+,[%w":,]-"m":{"id":".-","role":"(%a+)"()')
  if role == 'user' or role == 'system' then return {role = role} end
  if role == 'tool' then
    local at = string.find(envelope, ',"tool_call_id":"', after, true)
    local answered = at and json_string_at(envelope, at + 17)
    if not answered then return nil end
    return {role = role, tool_call_id = answered}
  end
  if role ~= 'assistant' then return nil end
  if not string.find(envelope, '"tool_calls":[', after, true) then
    return {role = role, tool_calls = NO_CALLS}
  end
  local ok, decoded = pcall(cjson.decode, envelope)
  local m = ok and type(decoded) == 'table' and decoded.m
  if type(m) ~= 'table' then return nil end
  if m.tool_calls == nil then m.tool_calls = NO_CALLS end
  if type(m.tool_calls) ~= 'table' then return nil end
  for _, call in ipairs(m.tool_calls) do
    if type(call) ~= 'table' or type(call.id) ~= 'string' then return nil end
  end
  return m
end
