-- Redlock: after a grant on a quorum, make this node agree on the combined fencing token (line.lua
-- precedes this script). If this owner holds the key, its value becomes "<owner>:<token>" (expiry
-- kept); if it holds a live read grant, that grant's token becomes `token`. Either way the fence
-- counter is raised to at least the token (expiring fenceTtlMs from now), so that the next grant
-- on any quorum (which shares a node with this one) counts past it while the counter lives;
-- after that, the node's clock is past it. Returns 1 settled, 0 this owner holds nothing here.
local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local readersKey = KEYS[3]
local tokensKey = KEYS[4]
local owner = ARGV[1]
local token = ARGV[2]      -- decimal, the highest token among the granting nodes
local fenceTtlMs = ARGV[3] -- lifetime of the fence counter, ms

local current = redis.call('GET', lockKey)
if current and string.sub(current, 1, string.find(current, ':', 1, true) - 1) == owner then
  redis.call('SET', lockKey, owner .. ':' .. token, 'KEEPTTL')
elseif tonumber(redis.call('ZSCORE', readersKey, owner) or '0') > nowMs() then
  redis.call('HSET', tokensKey, owner, token)
else
  return 0
end
local counter = tonumber(redis.call('GET', fenceKey) or '0')
if counter < tonumber(token) then
  redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
end
return 1
