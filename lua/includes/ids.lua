-- Message ids read from stored envelopes with a pattern, without decoding them.

-- The message id as the envelope spells it in JSON (escapes kept), or nil. Between
-- t and m only flags ("x":1,"s":0,): quotes, letters, digits, colons and commas.
local function envelope_id(envelope)
  return string.match(envelope, '^{"t":%d+,[%w":,]-"m":{"id":"(.-)","role":"')
end
