-- Redlock: after a grant on a quorum, make this node agree on the combined fencing token.
-- If this owner holds the key, its value becomes "<owner>:<token>" (expiry kept) and the fence
-- counter is raised to at least the token (expiring fenceTtlMs from now), so that the next grant
-- on any quorum (which shares a node with this one) counts past it while the counter lives;
-- after that, the node's clock is past it. Returns 1 settled, 0 this owner does not hold the key.
local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local owner = ARGV[1]
local token = ARGV[2]      -- decimal, the highest token among the granting nodes
local fenceTtlMs = ARGV[3] -- lifetime of the fence counter, ms

local current = redis.call('GET', lockKey)
if not current then
  return 0
end
local sep = string.find(current, ':', 1, true)
if string.sub(current, 1, sep - 1) ~= owner then
  return 0
end
redis.call('SET', lockKey, owner .. ':' .. token, 'KEEPTTL')
local counter = tonumber(redis.call('GET', fenceKey) or '0')
if counter < tonumber(token) then
  redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
end
return 1
