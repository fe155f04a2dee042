-- The open tool call ids as the meta hash stores them.

local function encode_open(open)
  if #open == 0 then return '' end
  return cjson.encode(open)
end
