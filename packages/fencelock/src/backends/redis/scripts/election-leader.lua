-- Read the leader of an election in one atomic step (read only): {"<owner>:<term>:<value>",
-- PTTL, candidates}, or {} when nobody leads (election-line.lua describes the keys). Candidates
-- in line are not leaders; `candidates` counts the leader and the live entries of the line other
-- than the leader's (an entry whose expiry in `waiters` has passed is skipped here, and dropped
-- by the next script that walks the line).
--   KEYS  leader, queue, waiters
local grant = redis.call('GET', KEYS[1])
if not grant then return {} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then return {} end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local colon = string.find(grant, ':', 1, true)
local leader = colon and string.sub(grant, 1, colon - 1) or grant
return {grant, pttl, 1 + liveEntries(KEYS[2], KEYS[3], now, leader)}
