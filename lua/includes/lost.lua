-- Noticing a conversation that lost one of its keys.
--- @include "codes"
-- A refusal when the conversation's keys disagree: its meta hash gone while messages
-- remain (`exists` false), or its messages gone while the meta hash counts tokens of
-- some (evicted under a maxmemory policy other than noeviction, or deleted). Its turn
-- state, token total and write records are lost, so no write may go on from them.
local function keys_lost(exists, total, length)
  if not exists and length > 0 then
    return {CORRUPT, -1, 'the meta hash is gone while messages remain (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
  end
  if exists and total > 0 and length == 0 then
    return {CORRUPT, -1, 'the messages are gone while the meta hash counts ' .. total .. ' tokens (evicted or deleted; the store needs maxmemory-policy noeviction): replace() or delete() the conversation'}
  end
  return nil
end
