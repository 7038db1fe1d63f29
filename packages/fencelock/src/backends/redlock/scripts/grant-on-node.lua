-- Redlock, on one node: grant a lock key to an owner and issue this node's fencing counter,
-- atomically (no line of waiters: a Redlock contender retries with jitter).
-- Returns {1, counter} when granted, {0, remaining PTTL of the holder} when held by another owner.
local lockKey = KEYS[1]   -- holds "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]  -- per-key fencing counter; never expires
local owner = ARGV[1]     -- contender id (hex, no ':')
local ttlMs = ARGV[2]     -- lease length in whole milliseconds

local current = redis.call('GET', lockKey)
if current then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    -- The same owner asks again (its earlier reply was lost): refresh and answer again.
    redis.call('PEXPIRE', lockKey, ttlMs)
    return {1, string.sub(current, sep + 1)}
  end
  return {0, redis.call('PTTL', lockKey)}
end

-- Free: bump the counter and set the key in the same script, so no grant goes without a token.
local token = redis.call('INCR', fenceKey)
redis.call('SET', lockKey, owner .. ':' .. token, 'NX', 'PX', ttlMs)
return {1, tostring(token)}
