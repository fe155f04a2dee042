--[[
transcript: the archived originals and the live list, read at one instant.

KEYS[1] msgs     LIST of envelopes
KEYS[2] archive  LIST of replaced envelopes, oldest first

Returns {archive envelopes, live envelopes}.
]]

return {redis.call('LRANGE', KEYS[2], 0, -1), redis.call('LRANGE', KEYS[1], 0, -1)}
