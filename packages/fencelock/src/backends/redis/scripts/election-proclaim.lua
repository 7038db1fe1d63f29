-- Replace the leader's value by compare-and-set of owner and term (etcd's Proclaim), keeping the
-- grant's remaining TTL, and publish "*" on the election's channel (election-line.lua describes
-- the keys). Returns 1 proclaimed, 0 not held (nobody leads), -1 another owner or term leads
-- (nothing stored).
local leaderKey = KEYS[1]
local channel = KEYS[2]
local expected = ARGV[1] .. ':' .. ARGV[2] .. ':'  -- "<owner>:<term>:"
local value = ARGV[3]

local current = redis.call('GET', leaderKey)
if not current then return 0 end
if string.sub(current, 1, #expected) ~= expected then return -1 end
local pttl = redis.call('PTTL', leaderKey)
if pttl <= 0 then return 0 end
redis.call('SET', leaderKey, expected .. value, 'PX', pttl)
redis.call('PUBLISH', channel, '*')
return 1
