-- Withdraw a contender that gave up (semaphore-line.lua precedes this script): take it out of
-- the line and, unless keepGrant is '1', drop its permit whatever the token (a grant whose reply
-- was lost). Then wake the waiters that this lets in. Returns 1 when a permit was dropped.
local holdersKey, tokensKey, permitsKey = KEYS[1], KEYS[2], KEYS[3]
local queueKey, waitersKey, channel = KEYS[4], KEYS[5], KEYS[6]
local owner, keepGrant = ARGV[1], ARGV[2]

redis.call('ZREM', queueKey, owner)
redis.call('HDEL', waitersKey, owner)
local dropped = 0
if keepGrant ~= '1' and redis.call('ZREM', holdersKey, owner) == 1 then
  redis.call('HDEL', tokensKey, owner)
  dropped = 1
end
local permits = tonumber(redis.call('GET', permitsKey) or '0')
if permits > 0 then wakeNext(holdersKey, tokensKey, queueKey, waitersKey, channel, permits) end
return dropped
