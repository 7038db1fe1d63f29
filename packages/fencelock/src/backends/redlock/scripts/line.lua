-- Redlock, on one node: the key's line of waiters and its readers, the fragment the lock scripts
-- begin with (scripts.ts puts it in front of them). The line is a sorted set of owners scored by
-- their ticket: the time each contender started waiting, in µs on its own clock, the same on
-- every node, so that every node orders the same contenders the same way (ties by owner id) and
-- the head of one node's line is the head of every line it stands in. A hash holds each entry's
-- expiry (ms on this node's clock, TIME) under "<owner>", and '1' under "<owner>:read" for a
-- waiting reader (no field: a writer; owners are hex, so no clash): an entry lives waiterTtlMs
-- past its owner's latest attempt, so a waiter that vanished blocks the line for that long at
-- most. Read grants (Curator's InterProcessReadWriteLock) live in a sorted set of reading owners
-- by grant expiry (ms, TIME) and a hash of their tokens, both expiring with the latest grant.

-- This node's clock in ms.
local function nowMs()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Keep `key` at least until `atMs` (ms, TIME).
local function keepUntil(key, atMs)
  local left = atMs - nowMs()
  if left > 0 and redis.call('PTTL', key) < left then redis.call('PEXPIRE', key, left) end
end

-- Drop an entry from the line and its fields.
local function dropEntry(queueKey, waitersKey, owner)
  redis.call('ZREM', queueKey, owner)
  redis.call('HDEL', waitersKey, owner, owner .. ':read')
end

-- The head of the line after dropping expired entries there: owner and ms its entry has left,
-- or nil when the line is empty.
local function lineHead(queueKey, waitersKey)
  local now
  while true do
    local first = redis.call('ZRANGE', queueKey, 0, 0)[1]
    if not first then return nil, 0 end
    now = now or nowMs()
    local expiresAt = tonumber(redis.call('HGET', waitersKey, first) or '0')
    if expiresAt > now then return first, expiresAt - now end
    dropEntry(queueKey, waitersKey, first)
  end
end

-- Walk the line from its head, dropping expired entries, and call visit(owner, ms left, reads)
-- on each live entry until it returns true.
local function walkLine(queueKey, waitersKey, visit)
  local start = 0
  local now = nowMs()
  while true do
    local batch = redis.call('ZRANGE', queueKey, start, start + 15)
    if #batch == 0 then return end
    local dropped = 0
    for _, entry in ipairs(batch) do
      local fields = redis.call('HMGET', waitersKey, entry, entry .. ':read')
      local left = tonumber(fields[1] or '0') - now
      if left <= 0 then
        dropEntry(queueKey, waitersKey, entry)
        dropped = dropped + 1
      elseif visit(entry, left, fields[2] == '1') then
        return
      end
    end
    start = start + #batch - dropped
  end
end

-- Put `owner` in the line by its ticket (a reader when `reads`), or keep its place and refresh
-- its entry, to live waiterTtlMs from now; both keys outlive the newest entry.
local function joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs, reads)
  redis.call('ZADD', queueKey, ticket, owner)
  redis.call('HSET', waitersKey, owner, nowMs() + waiterTtlMs)
  if reads then redis.call('HSET', waitersKey, owner .. ':read', '1') end
  if redis.call('PTTL', queueKey) < waiterTtlMs then redis.call('PEXPIRE', queueKey, waiterTtlMs) end
  if redis.call('PTTL', waitersKey) < waiterTtlMs then redis.call('PEXPIRE', waitersKey, waiterTtlMs) end
end

-- Take `owner` out of the line; true if it stood there.
local function leaveLine(queueKey, waitersKey, owner)
  if redis.call('ZREM', queueKey, owner) == 0 then return false end
  redis.call('HDEL', waitersKey, owner, owner .. ':read')
  return true
end

-- Tell the waiters at the front of the line that the key may be theirs, each by its owner id on
-- the key's channel (except `except`): the consecutive readers at the head, up to the first
-- writer; or, when the head is a writer, that writer alone (unless `readersOnly`, or what it
-- returns when a function, asked only then: readers still hold the key, so a writer cannot go).
local function wakeFront(queueKey, waitersKey, channel, except, readersOnly)
  local first = true
  walkLine(queueKey, waitersKey, function(entry, _, reads)
    if not reads then
      if type(readersOnly) == 'function' then readersOnly = readersOnly() end
      if first and not readersOnly and entry ~= except then redis.call('PUBLISH', channel, entry) end
      return true
    end
    first = false
    if entry ~= except then redis.call('PUBLISH', channel, entry) end
    return false
  end)
end

-- Tell the head of the line, if any and other than `except`, that the key is free (wakeFront).
local function wakeHead(queueKey, waitersKey, channel, except)
  wakeFront(queueKey, waitersKey, channel, except, false)
end

-- Drop the readers whose time ran out (crashed or cut off); returns how many hold the key now
-- and the ms until the last of them ends (0, 0 when none). One EXISTS when nobody reads: the
-- readers' keys expire with their latest grant, so no key means no live reader.
local function liveReaders(readersKey, tokensKey)
  if redis.call('EXISTS', readersKey) == 0 then return 0, 0 end
  local now = nowMs()
  local expired = redis.call('ZRANGEBYSCORE', readersKey, '-inf', now)
  for _, reader in ipairs(expired) do
    redis.call('ZREM', readersKey, reader)
    redis.call('HDEL', tokensKey, reader)
  end
  local last = redis.call('ZRANGE', readersKey, -1, -1, 'WITHSCORES')
  if #last == 0 then return 0, 0 end
  return redis.call('ZCARD', readersKey), tonumber(last[2]) - now
end

-- Set (or extend) `owner`'s read grant to ttlMs from now with its token; the readers' keys live
-- as long as the latest grant.
local function holdRead(readersKey, tokensKey, owner, token, ttlMs)
  local untilMs = nowMs() + tonumber(ttlMs)
  redis.call('ZADD', readersKey, untilMs, owner)
  redis.call('HSET', tokensKey, owner, token)
  keepUntil(readersKey, untilMs)
  keepUntil(tokensKey, untilMs)
end

-- This node's next token for the key, recorded in its counter for fenceTtlMs: the last token + 1
-- while the counter lives, so the nodes of a quorum, whose counters were settled to one value,
-- agree without a second round; where the counter is gone (a fresh key, the counter expired, the
-- node restarted empty) the node's clock in whole milliseconds, written in microseconds (ms ×
-- 1000: nodes that read the same millisecond agree on a fresh key; others take the settle
-- round). Below 2^53 (µs until the year 2255), exact in Lua's doubles; '%d' writes every digit.
local function issueToken(fenceKey, fenceTtlMs)
  local last = redis.call('GET', fenceKey)
  local token
  if last then
    token = string.format('%d', tonumber(last) + 1)
  else
    local time = redis.call('TIME')
    token = string.format('%d', tonumber(time[1]) * 1000000 + math.floor(tonumber(time[2]) / 1000) * 1000)
  end
  redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
  return token
end

-- Lock-delay (Chubby's, Burrows OSDI 2006 §2.4; Consul's session LockDelay): an exclusive grant
-- made with a delay of D ms keeps a key beside it (the lock's, or the election's, `delay`)
-- holding "<owner>:<D>" whose PX is the grant's TTL + D, set in the same script as the grant and
-- moved with it by every renewal and repeated attempt of its holder, so that on this node it
-- outlives the grant by exactly D (one clock, one instant). A release or withdrawal that deletes
-- the live grant deletes it too; when the grant ends otherwise (its TTL ran out, or it was taken
-- away) it stays, and while it lives with no grant beside it nobody is granted the object here,
-- the head of the line included. It expires by itself. A script given no delay key (nil) keeps
-- no delay.

-- Record `owner`'s delay of `delayMs` (none when 0) beside its grant of `ttlMs` from now.
local function recordDelay(delayKey, owner, ttlMs, delayMs)
  local d = tonumber(delayMs or '0') or 0
  if not delayKey or d <= 0 then return end
  redis.call('SET', delayKey, owner .. ':' .. string.format('%d', d), 'PX', tonumber(ttlMs) + d)
end

-- `owner`'s grant now lives `ttlMs` from now (renewed, or asked again): its delay, if any, ends
-- its D past that. A repeated attempt carrying a delay (`delayMs` > 0) records that one.
local function moveDelay(delayKey, owner, ttlMs, delayMs)
  if not delayKey then return end
  if (tonumber(delayMs or '0') or 0) > 0 then return recordDelay(delayKey, owner, ttlMs, delayMs) end
  local value = redis.call('GET', delayKey)
  if not value then return end
  local sep = string.find(value, ':', 1, true)
  if string.sub(value, 1, sep - 1) ~= owner then return end
  redis.call('PEXPIRE', delayKey, tonumber(ttlMs) + tonumber(string.sub(value, sep + 1)))
end

-- `owner`'s live grant was deleted by its release or withdrawal: no delay follows it.
local function clearDelay(delayKey, owner)
  if not delayKey then return end
  local value = redis.call('GET', delayKey)
  if value and string.sub(value, 1, #owner + 1) == owner .. ':' then redis.call('DEL', delayKey) end
end

-- Ms of a delay left here (0: none). Asked only where no grant holds the object: a delay key then
-- belongs to a grant that ended without a release.
local function delayLeft(delayKey)
  if not delayKey then return 0 end
  local left = redis.call('PTTL', delayKey)
  if left > 0 then return left end
  return 0
end
