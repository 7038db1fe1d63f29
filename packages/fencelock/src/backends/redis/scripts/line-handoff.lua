-- Hand a key that no writer holds to the head of its line: the fragment queued-release.lua and
-- queued-abandon.lua begin with, after lock-line.lua (scripts.ts puts both in front of them).
-- Entries whose time ran out are dropped on the way.
-- - The head is a writer and no reader holds the key: the head's grant is made as
--   queued-acquire.lua makes one (nextToken), the key is set to "<head>:<token>" for a first TTL
--   of min(head's ttlMs, capMs), and "<head>:<token>:<first TTL>" is published on the key's
--   channel: the waiter takes the grant on receipt, with no attempt of its own, then renews it to
--   its full TTL at once. A waiter that never takes it (crashed, message lost) costs the first TTL
--   at most; a waiter whose message was lost gets the grant from its next attempt ("the same
--   owner asks again" in queued-acquire.lua). An entry with no TTL recorded (written by an older
--   queued-acquire.lua) is only woken by its owner id, as before: its own attempt takes the key.
-- - The head is a writer and readers still hold the key: nothing; the last reader's release (or
--   expiry, seen by the writer's next attempt) hands it on.
-- - The head is a reader: the readers at the head of the line, up to the first writer, are each
--   woken by their owner id (a bare id: the waiter attempts at once, read-acquire.lua grants it);
--   nobody behind that writer wakes (no herd).
-- - The key is in a lock-delay (a writer's grant ended without a release; a live release deletes
--   the delay key before it hands on): nothing; the line keeps its order and the waiters, told
--   the delay left by their attempts, attempt again when it ends (the head is granted then).
-- A handed writer's grant records the lock-delay its entry carries ("<head>:delay"), for its
-- first TTL (its confirming renewal extends it with the grant).
local function handOff(keys, capMs, fenceGraceMs)
  if delayLeft(keys.delay) > 0 then return end
  local first, _, reads = headOfLine(keys.queue, keys.waiters)
  if not first then return end
  if reads then
    walkLine(keys.queue, keys.waiters, 16, function(entry, _, isReader)
      if not isReader then return true end
      redis.call('PUBLISH', keys.channel, entry)
      return false
    end)
    return
  end
  if liveReaders(keys.readers, keys.readerTokens) > 0 then return end
  local entry = redis.call('HMGET', keys.waiters, first .. ':ttl', first .. ':delay')
  local ttlMs = tonumber(entry[1] or '0')
  if ttlMs <= 0 then
    redis.call('PUBLISH', keys.channel, first)
    return
  end
  leaveLine(keys.queue, keys.waiters, first)
  local token = nextToken(keys.fence, string.format('%d', ttlMs + fenceGraceMs))
  local firstTtlMs = string.format('%d', math.min(ttlMs, capMs))
  redis.call('SET', keys.lock, first .. ':' .. token, 'PX', firstTtlMs)
  if entry[2] then holdDelay(keys.delay, firstTtlMs, entry[2]) end
  redis.call('PUBLISH', keys.channel, first .. ':' .. token .. ':' .. firstTtlMs)
end
