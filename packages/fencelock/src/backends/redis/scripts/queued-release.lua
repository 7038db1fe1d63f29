-- Compare-and-delete by owner and token (single node, with a line of waiters and readers), then
-- hand the key on (handOff, line-handoff.lua, which precedes this script after lock-line.lua):
-- - the writer's release: the key goes to the head of the line, granted in this script and told
--   on the key's release channel, so a waiting writer holds the key one message after the
--   release, with no attempt of its own; waiting readers at the head are woken instead (and
--   nobody else wakes);
-- - a reader's release (its owner and token among the readers): the last reader's release hands
--   the key on the same way (to the writer at the head of the line).
-- The writer's release of its live grant deletes its lock-delay (lock-line.lua's delay key: a
-- release ends the grant with no delay); a release that finds the grant gone (its TTL ran out)
-- leaves the delay running, and the hand-over waits for it.
-- Returns 1 released; 0 not held (no writer and no live reader); -1 this owner and token hold
-- nothing while someone holds the key (nothing is deleted).
local keys = {
  lock = KEYS[1],
  fence = KEYS[2],          -- the key's last token (see queued-acquire.lua)
  channel = KEYS[3],        -- release notifications for this key
  queue = KEYS[4],          -- list of waiting owners, head first
  waiters = KEYS[5],        -- hash: entry expiry (ms), ttlMs and mode per owner
  readers = KEYS[6],        -- sorted set: reading owner -> grant expiry (ms)
  readerTokens = KEYS[7],   -- hash: reading owner -> its token
  delay = KEYS[8],          -- the writer's lock-delay (absent from older callers: none)
}
local owner, token = ARGV[1], ARGV[2]
local capMs = tonumber(ARGV[3])         -- longest first TTL of a handed grant, ms
local fenceGraceMs = tonumber(ARGV[4])  -- the fence counter outlives a grant's TTL this long

local current = redis.call('GET', keys.lock)
if current == owner .. ':' .. token then
  redis.call('DEL', keys.lock)
  if keys.delay then redis.call('DEL', keys.delay) end
  handOff(keys, capMs, fenceGraceMs)
  return 1
end

-- A reader's release; an entry whose time ran out is no longer held.
if redis.call('HGET', keys.readerTokens, owner) == token then
  local expiresAt = tonumber(redis.call('ZSCORE', keys.readers, owner) or '0')
  redis.call('ZREM', keys.readers, owner)
  redis.call('HDEL', keys.readerTokens, owner)
  if expiresAt > nowMs() then
    if not current and liveReaders(keys.readers, keys.readerTokens) == 0 then
      handOff(keys, capMs, fenceGraceMs)
    end
    return 1
  end
end
if current or liveReaders(keys.readers, keys.readerTokens) > 0 then return -1 end
return 0
