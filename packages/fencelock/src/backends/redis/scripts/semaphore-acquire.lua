-- Grant one permit of a semaphore in arrival order and issue its fencing token, atomically
-- (semaphore-line.lua precedes this script and describes the keys). A permit is granted when
-- fewer than `permits` are held and fewer live waiters stand ahead of this contender than
-- permits are free; a waiting contender otherwise joins the line (or keeps its place) with its
-- ticket: the caller's (Redlock: the µs of its first attempt, so every node orders waiters
-- alike), or, when '0', the server's clock at its first entry. A holder asking again is answered
-- with its token and its permit refreshed (a lost reply is safe).
-- The token is the larger of the semaphore's last token + 1 and the server's clock in µs, as
-- for a lock (queued-acquire.lua); the counter expires fenceTtlMs after the grant.
-- Returns {1, token} granted; {0, ms} not granted, where ms bounds how long nothing may change
-- (the first permit's or the first waiter's time left); {-1, permits in use} when holders or
-- waiters use another permit count (nothing is written).
local holdersKey, tokensKey, permitsKey = KEYS[1], KEYS[2], KEYS[3]
local queueKey, waitersKey, fenceKey = KEYS[4], KEYS[5], KEYS[6]
local owner = ARGV[1]
local ttlMs = tonumber(ARGV[2])
local permits = tonumber(ARGV[3])
local waiterTtlMs = tonumber(ARGV[4])   -- entry lifetime; 0: a single attempt, never queued
local fenceTtlMs = ARGV[5]
local ticket = ARGV[6]                  -- '0': the server's clock at the first entry

local held = liveHolders(holdersKey, tokensKey)
local inUse = tonumber(redis.call('GET', permitsKey) or '0')
if inUse ~= permits and inUse > 0 and (held > 0 or redis.call('ZCARD', queueKey) > 0) then
  return {-1, inUse}
end

if redis.call('ZSCORE', holdersKey, owner) then
  redis.call('ZADD', holdersKey, 'XX', nowMs() + ttlMs, owner)
  keepHolders(holdersKey, tokensKey, permitsKey)
  return {1, redis.call('HGET', tokensKey, owner)}
end

-- A waiting contender stands in line before it counts who is ahead of it.
if waiterTtlMs > 0 then
  if ticket == '0' then ticket = string.format('%d', nowUs()) end
  redis.call('ZADD', queueKey, 'NX', ticket, owner)
  redis.call('HSET', waitersKey, owner, nowMs() + waiterTtlMs)
  redis.call('SET', permitsKey, permits, 'KEEPTTL')
  keepUntil(queueKey, nowMs() + waiterTtlMs)
  keepUntil(waitersKey, nowMs() + waiterTtlMs)
  keepUntil(permitsKey, nowMs() + waiterTtlMs)
end

local free = permits - held
if free <= 0 then
  local first = redis.call('ZRANGE', holdersKey, 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - nowMs(), 1)}
end
local ahead, firstLeft = liveAhead(queueKey, waitersKey, owner, free)
if ahead >= free then return {0, math.max(firstLeft, 1)} end

redis.call('ZREM', queueKey, owner)
redis.call('HDEL', waitersKey, owner)
-- '%d' writes every digit (tostring would round to 14 significant digits).
local last = tonumber(redis.call('GET', fenceKey) or '0')
local token = string.format('%d', math.max(last + 1, nowUs()))
redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
redis.call('ZADD', holdersKey, nowMs() + ttlMs, owner)
redis.call('HSET', tokensKey, owner, token)
redis.call('SET', permitsKey, permits, 'KEEPTTL')
keepHolders(holdersKey, tokensKey, permitsKey)
return {1, token}
