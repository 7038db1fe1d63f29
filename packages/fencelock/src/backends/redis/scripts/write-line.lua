-- The writer's side of the granting scripts (queued-acquire.lua, attempt-all.lua), after
-- lock-line.lua (scripts.ts puts both in front of them): whether a writer may take a key now, and
-- its grant, kept apart so that a script can decide several keys before it grants any. Deciding
-- writes nothing but the clean-up of entries whose time ran out (walkLine, liveReaders).
-- `k` is a lock's keys (grantKeysAt).

-- Whether writer `owner` may take the key now:
-- - 'again', token: it holds the key already (its earlier reply was lost, or a release handed it
--   the key and the message has not reached it);
-- - 'free', heads: nobody holds the key and the line is empty or `owner` heads it (`heads`);
-- - 'busy', ms: not now; ms bounds how long the key can stay unavailable to `owner` with nothing
--   changing: the holder's PTTL, the lock-delay left after a grant that ended without a release
--   (delayLeft: nobody goes before it ends, the head of the line included), the remaining entry
--   time of the head of the line when another waiter is first, or the time until the last
--   reader's grant ends.
local function writeVerdict(k, owner)
  local current = redis.call('GET', k.lock)
  if current then
    local sep = string.find(current, ':', 1, true)
    if string.sub(current, 1, sep - 1) == owner then
      return 'again', string.sub(current, sep + 1)
    end
    return 'busy', redis.call('PTTL', k.lock)
  end
  -- Free of writers, but still in a lock-delay: nobody goes yet (the line keeps its order).
  local delayed = delayLeft(k.delay)
  if delayed > 0 then return 'busy', delayed end
  -- Free of writers: the head of the line goes first; a contender behind it waits its turn.
  local first, left = headOfLine(k.queue, k.waiters)
  if first and first ~= owner then return 'busy', left end
  -- Readers share the key; a writer waits until the last of them is gone.
  local readers, readersLeft = liveReaders(k.readers, k.readerTokens)
  if readers > 0 then return 'busy', math.max(readersLeft, 1) end
  return 'free', first ~= nil
end

-- The grant of a verdict that is not 'busy': {1, token}. 'again' refreshes the held key; 'free'
-- issues the token and sets the key in one go, so no grant goes without a token. Either records
-- the grant's lock-delay (delayMs > 0; 'again' without one keeps the delay it has: holdDelay).
local function grantWrite(k, owner, ttlMs, fenceTtlMs, verdict, detail, delayMs)
  if verdict == 'again' then
    redis.call('PEXPIRE', k.lock, ttlMs)
    holdDelay(k.delay, ttlMs, delayMs)
    return {1, detail}
  end
  if detail then leaveLine(k.queue, k.waiters, owner) end
  local token = nextToken(k.fence, fenceTtlMs)
  redis.call('SET', k.lock, owner .. ':' .. token, 'PX', ttlMs)
  if (tonumber(delayMs or '0') or 0) > 0 then holdDelay(k.delay, ttlMs, delayMs) end
  return {1, token}
end

-- The answer to a writer whose verdict is 'busy': {0, ms}, after it joins the tail of the line or
-- keeps its place there with its lock-delay (waiterTtlMs 0: a single attempt, never queued).
local function refuseWrite(k, owner, ttlMs, waiterTtlMs, ms, delayMs)
  enqueue(k.queue, k.waiters, owner, ttlMs, waiterTtlMs, false, delayMs)
  return {0, ms}
end
