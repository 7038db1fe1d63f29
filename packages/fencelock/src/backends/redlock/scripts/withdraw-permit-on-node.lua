-- Redlock, on one node: a waiter lost the vote on a semaphore's permit, and keeps its place
-- (semaphore-line.lua, the single-node backend's fragment, precedes this script). Its permit here
-- is dropped whatever the token, and it stands in the line with its ticket (the µs of its first
-- attempt, the same on every node), also where this node granted it and so took its entry out:
-- every node then orders the contenders of a split vote alike, and the next vote goes to the
-- first of them instead of splitting again. Where the semaphore's holders or waiters here use
-- another permit count, it does not join (as semaphore-acquire.lua would refuse it). Where a
-- permit was dropped, the waiters it lets in are woken, except this owner: it attempts again
-- after its own wait, and a message to itself would make it attempt at once, again and again.
-- Returns 1 when a permit of this owner was dropped, else 0.
local holdersKey, tokensKey, permitsKey = KEYS[1], KEYS[2], KEYS[3]
local queueKey, waitersKey, channel = KEYS[4], KEYS[5], KEYS[6]
local owner = ARGV[1]
local permits = tonumber(ARGV[2])
local ticket = ARGV[3]                 -- µs the waiter started waiting, on its clock
local waiterTtlMs = tonumber(ARGV[4])  -- entry lifetime from now, ms

local dropped = 0
if redis.call('ZREM', holdersKey, owner) == 1 then
  redis.call('HDEL', tokensKey, owner)
  dropped = 1
end

local held = liveHolders(holdersKey, tokensKey)
local inUse = tonumber(redis.call('GET', permitsKey) or '0')
if inUse == permits or inUse == 0 or (held == 0 and redis.call('ZCARD', queueKey) == 0) then
  redis.call('ZADD', queueKey, ticket, owner)
  redis.call('HSET', waitersKey, owner, nowMs() + waiterTtlMs)
  redis.call('SET', permitsKey, permits, 'KEEPTTL')
  keepUntil(queueKey, nowMs() + waiterTtlMs)
  keepUntil(waitersKey, nowMs() + waiterTtlMs)
  keepUntil(permitsKey, nowMs() + waiterTtlMs)
  inUse = permits
end

-- Where that freed a permit: as wakeNext (semaphore-line.lua), but this owner is not told; it
-- keeps its slot among those the free permits let in.
local free = 0
if dropped == 1 then free = inUse - held end
local start = 0
while free > 0 do
  local batch = redis.call('ZRANGE', queueKey, start, start + free - 1)
  if #batch == 0 then break end
  local expired = 0
  for _, entry in ipairs(batch) do
    if tonumber(redis.call('HGET', waitersKey, entry) or '0') <= nowMs() then
      redis.call('ZREM', queueKey, entry)
      redis.call('HDEL', waitersKey, entry)
      expired = expired + 1
    else
      if entry ~= owner then redis.call('PUBLISH', channel, entry) end
      free = free - 1
    end
  end
  start = start + #batch - expired
end
return dropped
