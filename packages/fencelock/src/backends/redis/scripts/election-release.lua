-- A leader resigns: compare-and-delete of owner and term (its value goes with the grant), then
-- the election is handed over to the head of the line in this script (handOver,
-- election-line.lua), or "*" published when nobody waits.
-- A resignation of the live grant deletes its lock-delay; one that finds it gone leaves it.
-- Returns 1 released; 0 not held (nobody leads); -1 another owner or term leads (nothing deleted).
local e = electionKeysAt(1)          -- leader, term, queue, waiters, channel, delay
local expected = ARGV[1] .. ':' .. ARGV[2] .. ':'  -- "<owner>:<term>:"
local capMs = tonumber(ARGV[3])      -- longest first TTL of a handed grant, ms

local current = redis.call('GET', e.leader)
if not current then return 0 end
if string.sub(current, 1, #expected) ~= expected then return -1 end
redis.call('DEL', e.leader)
if e.delay then redis.call('DEL', e.delay) end
handOver(e, capMs)
return 1
