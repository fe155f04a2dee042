--[[
restore: put a conversation copied whole in place, at once: an import's, or a fork's.
Its list, meta hash and archive were written beforehand, in bounded chunks, to
staging keys under the conversation's hash tag (lua/stage-1.lua); this renames
them over the conversation's keys, so no reader sees part of a copy, and a
conversation it replaces goes whole. The lock is removed with it: a compaction of
what was replaced cannot write back (its fenced splice finds no lock). The version
goes past the replaced one's, so version and length still name the content. The
conversation's shared summaries (the HistoryManager's) are removed in the same
step: they summarized what was replaced. The staging keys are removed whatever
the outcome. Applied once per op: the restore is recorded in the new meta hash,
so a retry of one that was applied answers as it did.

KEYS[1] msgs      LIST of envelopes
KEYS[2] meta      HASH
KEYS[3] archive   LIST of replaced envelopes
KEYS[4] lock      STRING compaction lock
KEYS[5] summaries HASH the HistoryManager's shared summaries
KEYS[6] smsgs     LIST the staged envelopes
KEYS[7] smeta     HASH the staged meta hash
KEYS[8] sarchive  LIST the staged archive
ARGV[1] replace   1 to replace a conversation that exists, 0 to refuse
ARGV[2] live      how many envelopes smsgs holds when complete
ARGV[3] archived  how many sarchive holds when complete
ARGV[4] ttl       ms, the conversation's TTL, or 0 for none
ARGV[5] op        the operation token

Returns 1 when restored (or when op was); having written nothing, 0 when the
conversation exists and replace is 0, or -1 when the staged keys are not
complete (expired, removed).
]]
--- @include "records"

local msgs, meta, archive, lock, summaries = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local smsgs, smeta, sarchive = KEYS[6], KEYS[7], KEYS[8]
local replace, live, archived, ttl = ARGV[1] == '1', tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local op = ARGV[5]

local function unstage(result)
  redis.call('UNLINK', smsgs, smeta, sarchive)
  return result
end

if replayed(meta, WRITES, redis.call('HGET', meta, WRITES) or '', op) then return unstage(1) end
if not replace and redis.call('EXISTS', msgs, meta, archive) > 0 then return unstage(0) end
if redis.call('EXISTS', smeta) == 0 or redis.call('LLEN', smsgs) ~= live
    or redis.call('LLEN', sarchive) ~= archived then
  return unstage(-1)
end

local replaced = tonumber(redis.call('HGET', meta, 'version') or 0) or 0
local version = tonumber(redis.call('HGET', smeta, 'version') or 0) or 0
if redis.call('EXISTS', meta) == 1 and version <= replaced then
  redis.call('HSET', smeta, 'version', replaced + 1)
end
redis.call('UNLINK', msgs, meta, archive, lock, summaries)
redis.call('RENAME', smeta, meta)
commit(meta, WRITES, '', op, 1, nil)
if live > 0 then redis.call('RENAME', smsgs, msgs) end
if archived > 0 then redis.call('RENAME', sarchive, archive) end
for _, key in ipairs({msgs, meta, archive}) do
  -- a renamed key keeps the staging TTL: the conversation's own, or none, replaces it
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) else redis.call('PERSIST', key) end
end
return 1
