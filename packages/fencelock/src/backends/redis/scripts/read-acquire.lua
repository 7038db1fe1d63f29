-- Grant a read lock (single node) in arrival order and issue its fencing token, atomically
-- (lock-line.lua, which describes the keys, and read-line.lua precede this script). Curator's
-- InterProcessReadWriteLock rule on Redis: a reader goes when no writer holds the key and no live
-- writer's entry is ahead of its own in the line (readers ahead of it do not block it); otherwise
-- a waiting reader joins the line (or keeps its place), marked as a reader, and a release wakes
-- it by its owner id (line-handoff.lua). Each grant gets its own token from the key's one
-- sequence (the same counter as writers'), and the reader's entry among the readers expires
-- ttlMs after its grant (or latest renewal). A reader asking again (a lost reply) is answered
-- with its token and its grant refreshed.
-- A downgrade (heldWriter: the caller holds the write lock) passes that writer; any other writer
-- holding the key or waiting in line would wait for the caller (or be let in beside the reader),
-- so the attempt is refused: nothing of it stays, and the backend throws downgradeBlocked.
-- Returns {1, token} granted; {0, ms} not granted, where ms bounds how long nothing may change
-- (the writer's PTTL, or the first writer's entry time left); {-2} a downgrade blocked.
local lockKey = KEYS[1]       -- the writer's "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]      -- the key's last token (writers' and readers')
local queueKey = KEYS[3]      -- list of waiting owners, head first
local waitersKey = KEYS[4]    -- hash: owner -> entry expiry (ms); owner:read -> '1' for readers
local readersKey = KEYS[5]    -- sorted set: reading owner -> grant expiry (ms, Redis TIME)
local tokensKey = KEYS[6]     -- hash: reading owner -> its token
local owner = ARGV[1]         -- contender id (hex, no ':')
local ttlMs = ARGV[2]         -- lease length in whole milliseconds
local waiterTtlMs = tonumber(ARGV[3]) -- entry lifetime; 0: a single attempt, never queued
local fenceTtlMs = ARGV[4]    -- lifetime of the fence counter, ms (longer than ttlMs)
local heldWriter = ARGV[5]    -- owner of the caller's write lock (a downgrade), or ''

-- The same reader asks again (its earlier reply was lost): refresh and answer again.
local mine = redis.call('HGET', tokensKey, owner)
if mine and tonumber(redis.call('ZSCORE', readersKey, owner) or '0') > nowMs() then
  holdRead(readersKey, tokensKey, owner, mine, ttlMs)
  leaveLine(queueKey, waitersKey, owner)
  return {1, mine}
end

-- Not yet: wait in line, or, for a downgrade, withdraw (it would wait for itself).
local function notYet(ms)
  if heldWriter ~= '' then
    leaveLine(queueKey, waitersKey, owner)
    return {-2}
  end
  enqueue(queueKey, waitersKey, owner, ttlMs, waiterTtlMs, true)
  return {0, math.max(ms, 1)}
end

local current = redis.call('GET', lockKey)
if current and string.sub(current, 1, string.find(current, ':', 1, true) - 1) ~= heldWriter then
  return notYet(redis.call('PTTL', lockKey))
end
local writer, writerLeft = writerAhead(queueKey, waitersKey, owner)
if writer then return notYet(writerLeft) end

leaveLine(queueKey, waitersKey, owner)
local token = nextToken(fenceKey, fenceTtlMs)
holdRead(readersKey, tokensKey, owner, token, ttlMs)
return {1, token}
