-- A batch of messages in ARGV, as codec.Batch.args lays it out.

-- The batch from ARGV[at]: tokens (the batch's sum), n, then n envelopes, then
-- n role items (see walk). Returns tokens, n and the position of the first envelope.
local function read_batch(at)
  return tonumber(ARGV[at]), tonumber(ARGV[at + 1]), at + 2
end
