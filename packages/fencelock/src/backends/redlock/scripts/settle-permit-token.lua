-- Redlock: after a semaphore's permit was granted on a quorum, make this node agree on the
-- combined fencing token (semaphore-line.lua, the single-node backend's fragment, precedes this
-- script). If this owner holds a live permit here, its token becomes `token` (so that renew and
-- release, which compare owner and token, find it), and the semaphore's fence counter is raised
-- to at least the token, expiring fenceTtlMs from now: the next permit granted on any quorum
-- (which shares a node with this one) counts past it while the counter lives; after that, the
-- node's clock is past it. Returns 1 settled, 0 this owner holds no live permit here.
local holdersKey, tokensKey, fenceKey = KEYS[1], KEYS[2], KEYS[3]
local owner = ARGV[1]
local token = ARGV[2]      -- decimal, the highest token among the granting nodes
local fenceTtlMs = ARGV[3] -- lifetime of the fence counter, ms

local expiresAt = tonumber(redis.call('ZSCORE', holdersKey, owner) or '0')
if expiresAt <= nowMs() then
  return 0
end
redis.call('HSET', tokensKey, owner, token)
local counter = tonumber(redis.call('GET', fenceKey) or '0')
if counter < tonumber(token) then
  redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
end
return 1
