-- Release one permit by owner and token (semaphore-line.lua precedes this script), then wake
-- the waiters the freed permit lets in. Returns 1 released; 0 not held (no live permit at all);
-- -1 this owner and token hold no live permit while others do (nothing was deleted).
local holdersKey, tokensKey, permitsKey = KEYS[1], KEYS[2], KEYS[3]
local queueKey, waitersKey, channel = KEYS[4], KEYS[5], KEYS[6]
local owner, token = ARGV[1], ARGV[2]

local held = liveHolders(holdersKey, tokensKey)
if redis.call('HGET', tokensKey, owner) ~= token then
  if held > 0 then return -1 end
  return 0
end
redis.call('ZREM', holdersKey, owner)
redis.call('HDEL', tokensKey, owner)
wakeNext(holdersKey, tokensKey, queueKey, waitersKey, channel,
  tonumber(redis.call('GET', permitsKey) or '0'))
return 1
