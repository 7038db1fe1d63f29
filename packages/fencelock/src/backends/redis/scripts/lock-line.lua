-- Shared fragment of the lock scripts (scripts.ts puts it in front of them): Redis's clock, the
-- fencing token, a lock's readers and its line of waiters (read-line.lua adds what only the
-- readers' scripts use). A lock's keys, all under one hash tag (lock-keys.ts):
--   lock          "<owner>:<token>" of the writer that holds the key, with a PX expiry
--   fence         the key's last fencing token (fence-counter.ts), for writers and readers alike
--   queue         list of waiting owners, head first (FIFO)
--   waiters       hash: "<owner>" -> its entry's expiry (ms, Redis TIME); "<owner>:ttl" -> the
--                 ttlMs a waiting writer asked for (a release grants it that); "<owner>:read" ->
--                 '1' for a waiting reader (no field: a writer). Owners are hex, so no clash.
--   readers       sorted set: reading owner -> its grant's expiry (ms, Redis TIME)
--   readerTokens  hash: reading owner -> its grant's fencing token
--   delay         the lock-delay D (ms) of the writer's grant (Chubby's lock-delay), with a PX
--                 expiry of the grant's remaining TTL + D: written with the grant, extended by
--                 its renewals, deleted by a release of the live grant. Once the lock key has
--                 expired without a release, this key outlives it by exactly D on the server's
--                 clock, and the lock goes to nobody while it exists (delayLeft). Also
--                 "<owner>:delay" in the waiters hash: the D a waiting writer asked for, which a
--                 hand-over records with its grant.
-- Readers share the key and a writer is alone (Curator's InterProcessReadWriteLock): a writer
-- goes when nobody holds the key and it heads the line; a reader when no writer holds it (or only
-- the caller's own, a downgrade) and no live writer's entry is ahead of its own. The readers'
-- keys expire with their latest grant, the line's with its newest entry: nothing stays once the
-- lock is idle.

-- The keys of a lock as the granting scripts receive them, seven from KEYS[first] on (scripts.ts's
-- QueueKeys order): lock, fence, queue, waiters, readers, readerTokens, delay. A caller that
-- passes six (written before lock-delay) leaves `delay` nil: no delay is checked or recorded.
local function grantKeysAt(first)
  return {
    lock = KEYS[first], fence = KEYS[first + 1], queue = KEYS[first + 2],
    waiters = KEYS[first + 3], readers = KEYS[first + 4], readerTokens = KEYS[first + 5],
    delay = KEYS[first + 6],
  }
end

-- Redis's own clock ({seconds, microseconds}), read once per script, only when needed.
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

-- The next fencing token of the key, recorded in its counter for fenceTtlMs: the larger of the
-- last token + 1 and the clock in µs (fence-counter.ts). '%d' writes every digit (tostring and
-- '..' would round to 14 significant digits); both numbers stay below 2^53 (µs until the year
-- 2255), exact in Lua's doubles.
local function nextToken(fenceKey, fenceTtlMs)
  local last = tonumber(redis.call('GET', fenceKey) or '0')
  local token = string.format('%d', math.max(last + 1, nowUs()))
  redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
  return token
end

-- Lock-delay (Chubby's, Burrows OSDI 2006 section 2.4; Consul's session LockDelay). The ms an
-- object (a lock, an election) must still go to nobody after a grant that ended without a
-- release: the PTTL of its delay key, 0 when none (or no delay key passed). Only asked while
-- nobody holds the object: while its grant lives the key just rides along with it.
local function delayLeft(delayKey)
  if not delayKey then return 0 end
  return math.max(redis.call('PTTL', delayKey), 0)
end

-- Record the delay of a grant just made or refreshed for ttlMs: delayMs > 0 sets the delay key to
-- D = delayMs with a PX of ttlMs + D (its lock key's PX was set to ttlMs in this script, on the
-- same clock: the delay key outlives it by exactly D); otherwise a delay key already there (the
-- same holder's earlier grant, renewed or asked again) is extended by the D it stores.
local function holdDelay(delayKey, ttlMs, delayMs)
  if not delayKey then return end
  local d = tonumber(delayMs or '0') or 0
  if d <= 0 then
    d = tonumber(redis.call('GET', delayKey) or '0')
    if d <= 0 then return end
  end
  local px = string.format('%d', tonumber(ttlMs) + d)
  redis.call('SET', delayKey, string.format('%d', d), 'PX', px)
end

-- Drop the readers whose time ran out (crashed or cut off); returns how many hold the key now
-- and the ms until the last of them ends (0, 0 when none). One EXISTS when nobody reads: the
-- readers' keys expire with their latest grant, so no key means no live reader.
local function liveReaders(readersKey, tokensKey)
  if redis.call('EXISTS', readersKey) == 0 then return 0, 0 end
  local expired = redis.call('ZRANGEBYSCORE', readersKey, '-inf', nowMs())
  for _, reader in ipairs(expired) do
    redis.call('ZREM', readersKey, reader)
    redis.call('HDEL', tokensKey, reader)
  end
  local last = redis.call('ZRANGE', readersKey, -1, -1, 'WITHSCORES')
  if #last == 0 then return 0, 0 end
  return redis.call('ZCARD', readersKey), tonumber(last[2]) - nowMs()
end

-- Take `owner`'s entry out of the line (no-op when it has none).
local function leaveLine(queueKey, waitersKey, owner)
  local fields = {owner, owner .. ':ttl', owner .. ':read', owner .. ':delay'}
  if redis.call('HDEL', waitersKey, unpack(fields)) > 0 then
    redis.call('LREM', queueKey, 1, owner)
  end
end

-- Walk the line from its head, `step` entries per read, dropping entries whose time ran out
-- (their owners vanished), and call visit(owner, ms left, is a reader) on each live entry until
-- it returns true.
local function walkLine(queueKey, waitersKey, step, visit)
  local start = 0
  while true do
    local batch = redis.call('LRANGE', queueKey, start, start + step - 1)
    if #batch == 0 then return end
    local dropped = 0
    for _, entry in ipairs(batch) do
      local fields = redis.call('HMGET', waitersKey, entry, entry .. ':read')
      local left = tonumber(fields[1] or '0') - nowMs()
      if left <= 0 then
        redis.call('LREM', queueKey, 1, entry)
        redis.call('HDEL', waitersKey, entry, entry .. ':ttl', entry .. ':read', entry .. ':delay')
        dropped = dropped + 1
      elseif visit(entry, left, fields[2] == '1') then
        return
      end
    end
    start = start + #batch - dropped
  end
end

-- The first live entry of the line: owner, ms it has left and whether it reads; nil when none.
local function headOfLine(queueKey, waitersKey)
  local first, firstLeft, firstReads
  walkLine(queueKey, waitersKey, 1, function(entry, left, reads)
    first, firstLeft, firstReads = entry, left, reads
    return true
  end)
  return first, firstLeft, firstReads
end

-- Join the tail, or keep one's place and refresh the entry (and, for a writer, the TTL and the
-- lock-delay a handed grant is made with); both keys outlive the newest entry. waiterTtlMs 0: a
-- single attempt, never queued.
local function enqueue(queueKey, waitersKey, owner, ttlMs, waiterTtlMs, reads, delayMs)
  if waiterTtlMs <= 0 then return end
  if redis.call('HSET', waitersKey, owner, nowMs() + waiterTtlMs) == 1 then
    redis.call('RPUSH', queueKey, owner)
  end
  if reads then
    redis.call('HSET', waitersKey, owner .. ':read', '1')
  else
    redis.call('HSET', waitersKey, owner .. ':ttl', ttlMs)
    if (tonumber(delayMs or '0') or 0) > 0 then
      redis.call('HSET', waitersKey, owner .. ':delay', delayMs)
    end
  end
  if redis.call('PTTL', queueKey) < waiterTtlMs then redis.call('PEXPIRE', queueKey, waiterTtlMs) end
  if redis.call('PTTL', waitersKey) < waiterTtlMs then redis.call('PEXPIRE', waitersKey, waiterTtlMs) end
end
