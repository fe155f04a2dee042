--[[
restore: put an imported conversation in place, whole and at once. Its list, meta
hash and archive were written beforehand, in bounded chunks, to staging keys under
the conversation's hash tag; this renames them over the conversation's keys, so no
reader sees part of an import, and a conversation it replaces goes whole. The lock
is removed with it: a compaction of what was replaced cannot write back (its
fenced splice finds no lock). The version goes past the replaced one's, so version
and length still name the content. The conversation's shared summaries (the
HistoryManager's) are removed in the same step: they summarized what was replaced. The staging keys are removed whatever the
outcome.

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

Returns 1 when restored; having written nothing, 0 when the conversation exists
and replace is 0, or -1 when the staged keys are not complete (expired, removed).
]]

local msgs, meta, archive, lock, summaries = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local smsgs, smeta, sarchive = KEYS[6], KEYS[7], KEYS[8]
local replace, live, archived, ttl = ARGV[1] == '1', tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local function unstage(result)
  redis.call('UNLINK', smsgs, smeta, sarchive)
  return result
end

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
if live > 0 then redis.call('RENAME', smsgs, msgs) end
if archived > 0 then redis.call('RENAME', sarchive, archive) end
for _, key in ipairs({msgs, meta, archive}) do
  -- a renamed key keeps the staging TTL: the conversation's own, or none, replaces it
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) else redis.call('PERSIST', key) end
end
return 1
