-- Read the leader of an election in one atomic step: {"<owner>:<term>:<value>", PTTL}, or {}
-- when nobody leads (election-line.lua describes the keys). Candidates in line are not leaders.
local grant = redis.call('GET', KEYS[1])
if not grant then return {} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then return {} end
return {grant, pttl}
