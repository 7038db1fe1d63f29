-- Shared fragment of the semaphore scripts (scripts.ts puts it in front of them). A semaphore's
-- keys, all under one hash tag with its lock's (lock-keys.ts):
--   holders  sorted set: holder owner -> its permit's expiry (ms, Redis TIME)
--   tokens   hash: holder owner -> its permit's fencing token
--   permits  the permit count its holders and waiters use
--   queue    sorted set: waiting owner -> ticket (µs; arrival order, ties by owner id)
--   waiters  hash: waiting owner -> its entry's expiry (ms, Redis TIME)
--   channel  release notifications: a message names one waiter that may go now
-- Every key expires once the semaphore is idle: holders, tokens and permits with the latest
-- permit, queue and waiters with the newest entry.

-- Redis's clock ({seconds, microseconds}), read once per script.
local clock
local function time()
  if not clock then clock = redis.call('TIME') end
  return clock
end
local function nowMs()
  return tonumber(time()[1]) * 1000 + math.floor(tonumber(time()[2]) / 1000)
end
local function nowUs()
  return tonumber(time()[1]) * 1000000 + tonumber(time()[2])
end

-- Drop the permits whose time ran out (their owners crashed or were cut off); returns how many
-- are held now.
local function liveHolders(holdersKey, tokensKey)
  local expired = redis.call('ZRANGEBYSCORE', holdersKey, '-inf', nowMs())
  for _, owner in ipairs(expired) do
    redis.call('ZREM', holdersKey, owner)
    redis.call('HDEL', tokensKey, owner)
  end
  return redis.call('ZCARD', holdersKey)
end

-- Walk the line from its head, dropping entries whose time ran out, and count the live entries
-- before `owner`, stopping at `limit`. Returns the count and the ms the first live entry has
-- left (0 when there is none).
local function liveAhead(queueKey, waitersKey, owner, limit)
  local ahead, firstLeft, start = 0, 0, 0
  while ahead < limit do
    local batch = redis.call('ZRANGE', queueKey, start, start + 99)
    if #batch == 0 then break end
    local dropped = 0
    for _, entry in ipairs(batch) do
      if entry == owner then return ahead, firstLeft end
      local left = tonumber(redis.call('HGET', waitersKey, entry) or '0') - nowMs()
      if left <= 0 then
        redis.call('ZREM', queueKey, entry)
        redis.call('HDEL', waitersKey, entry)
        dropped = dropped + 1
      else
        if ahead == 0 then firstLeft = left end
        ahead = ahead + 1
        if ahead >= limit then break end
      end
    end
    start = start + #batch - dropped
  end
  return ahead, firstLeft
end

-- Wake the live entries at the head of the line that free permits let in now, one message each
-- (no herd: nobody behind them wakes).
local function wakeNext(holdersKey, tokensKey, queueKey, waitersKey, channel, permits)
  local free = permits - liveHolders(holdersKey, tokensKey)
  local start = 0
  while free > 0 do
    local batch = redis.call('ZRANGE', queueKey, start, start + free - 1)
    if #batch == 0 then return end
    local dropped = 0
    for _, entry in ipairs(batch) do
      if tonumber(redis.call('HGET', waitersKey, entry) or '0') <= nowMs() then
        redis.call('ZREM', queueKey, entry)
        redis.call('HDEL', waitersKey, entry)
        dropped = dropped + 1
      else
        redis.call('PUBLISH', channel, entry)
        free = free - 1
      end
    end
    start = start + #batch - dropped
  end
end

-- Keep `key` at least until `atMs` (ms, Redis TIME).
local function keepUntil(key, atMs)
  local left = atMs - nowMs()
  if left > 0 and redis.call('PTTL', key) < left then redis.call('PEXPIRE', key, left) end
end

-- Keep the holders' keys as long as the latest permit.
local function keepHolders(holdersKey, tokensKey, permitsKey)
  local last = redis.call('ZRANGE', holdersKey, -1, -1, 'WITHSCORES')
  if #last == 0 then return end
  local untilMs = tonumber(last[2])
  keepUntil(holdersKey, untilMs)
  keepUntil(tokensKey, untilMs)
  keepUntil(permitsKey, untilMs)
end
