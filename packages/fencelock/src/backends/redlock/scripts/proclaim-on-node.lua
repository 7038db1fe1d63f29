-- Redlock, on one node: compare-and-set an election's value (election-line.lua precedes this
-- script): stored only while this owner leads here with this term; the TTL is kept, and the
-- watchers are told. Returns 1 stored, 0 nobody leads here, -1 another owner or term leads.
local leaderKey = KEYS[1]
local changedChannel = KEYS[2]
local owner, term, value = ARGV[1], ARGV[2], ARGV[3]

local holder, held = leaderOf(leaderKey)
if not holder then return 0 end
if holder ~= owner or held ~= term then return -1 end
redis.call('HSET', leaderKey, 'value', value)
changed(changedChannel, 'proclaimed')
return 1
