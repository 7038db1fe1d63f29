-- Extend one permit to ttlMs from now, only while this owner and token hold it (never
-- re-creates a lapsed permit; semaphore-line.lua precedes this script). Returns 1 renewed, 0 not
-- held (no live permit at all), -1 this owner and token hold none while others do.
local holdersKey, tokensKey, permitsKey = KEYS[1], KEYS[2], KEYS[3]
local owner, token, ttlMs = ARGV[1], ARGV[2], tonumber(ARGV[3])

local held = liveHolders(holdersKey, tokensKey)
if redis.call('HGET', tokensKey, owner) ~= token then
  if held > 0 then return -1 end
  return 0
end
redis.call('ZADD', holdersKey, 'XX', nowMs() + ttlMs, owner)
keepHolders(holdersKey, tokensKey, permitsKey)
return 1
