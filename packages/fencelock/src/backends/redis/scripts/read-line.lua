-- The readers' side of the lock scripts (read-acquire.lua, read-renew.lua, attempt-all.lua), after
-- lock-line.lua (scripts.ts puts both in front of them): granting and renewing a read grant, and
-- the line's rule for a reader (a live writer's entry ahead of it blocks it), decided apart from
-- the grant as the writer's is (write-line.lua). The scripts that writers use on every grant and
-- release leave it out.

-- Keep `key` at least until `atMs` (ms, Redis TIME).
local function keepUntil(key, atMs)
  local left = atMs - nowMs()
  if left > 0 and redis.call('PTTL', key) < left then redis.call('PEXPIRE', key, left) end
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

-- The first live writer's entry ahead of `owner`'s (the whole line when `owner` has none):
-- owner and ms it has left; nil when no writer is ahead.
local function writerAhead(queueKey, waitersKey, owner)
  local writer, writerLeft
  walkLine(queueKey, waitersKey, 16, function(entry, left, reads)
    if entry == owner then return true end
    if not reads then
      writer, writerLeft = entry, left
      return true
    end
    return false
  end)
  return writer, writerLeft
end

-- Whether reader `owner` may take the key now (Curator's rule: no writer holds it, or only the
-- caller's own, `heldWriter`, a downgrade; and no live writer's entry is ahead of its own):
-- - 'again', token: it reads the key already (its earlier reply was lost);
-- - 'free';
-- - 'busy', ms: not now; ms bounds how long nothing may change (the writer's PTTL, the lock-delay
--   left after a writer's grant that ended without a release, or the first writer's entry time
--   left).
-- Writes nothing but the clean-up of entries whose time ran out. `k` is a lock's keys
-- (grantKeysAt).
local function readVerdict(k, owner, heldWriter)
  local mine = redis.call('HGET', k.readerTokens, owner)
  if mine and tonumber(redis.call('ZSCORE', k.readers, owner) or '0') > nowMs() then
    return 'again', mine
  end
  local current = redis.call('GET', k.lock)
  if current and string.sub(current, 1, string.find(current, ':', 1, true) - 1) ~= heldWriter then
    return 'busy', redis.call('PTTL', k.lock)
  end
  -- No writer holds the key, but the last one's grant ended without a release: its lock-delay.
  if not current then
    local delayed = delayLeft(k.delay)
    if delayed > 0 then return 'busy', delayed end
  end
  local writer, writerLeft = writerAhead(k.queue, k.waiters, owner)
  if writer then return 'busy', writerLeft end
  return 'free'
end

-- The grant of a verdict that is not 'busy': {1, token}, the reader's entry (re)set to ttlMs from
-- now, out of the line; 'again' keeps its token, 'free' issues the next one.
local function grantRead(k, owner, ttlMs, fenceTtlMs, verdict, token)
  leaveLine(k.queue, k.waiters, owner)
  if verdict ~= 'again' then token = nextToken(k.fence, fenceTtlMs) end
  holdRead(k.readers, k.readerTokens, owner, token, ttlMs)
  return {1, token}
end

-- The answer to a reader whose verdict is 'busy': a downgrade (`heldWriter` set) withdraws, {-2}
-- (it would wait for itself); another reader joins the line or keeps its place there
-- (waiterTtlMs 0: a single attempt, never queued), {0, ms}.
local function refuseRead(k, owner, ttlMs, waiterTtlMs, heldWriter, ms)
  if heldWriter ~= '' then
    leaveLine(k.queue, k.waiters, owner)
    return {-2}
  end
  enqueue(k.queue, k.waiters, owner, ttlMs, waiterTtlMs, true)
  return {0, math.max(ms, 1)}
end
