-- Message ids read from stored envelopes with a pattern, without decoding them.

-- The message id as the envelope spells it in JSON (escapes kept), or nil.
local function envelope_id(envelope)
  return string.match(envelope, '^{"t":%d+,"x":%d,"s":%d,"m":{"id":"(.-)","role":"')
end
