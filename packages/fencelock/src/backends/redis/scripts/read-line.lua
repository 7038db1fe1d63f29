-- The readers' side of the lock scripts (read-acquire.lua, read-renew.lua), after lock-line.lua
-- (scripts.ts puts both in front of them): granting and renewing a read grant, and the line's
-- rule for a reader (a live writer's entry ahead of it blocks it). The scripts that writers use
-- on every grant and release leave it out.

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
