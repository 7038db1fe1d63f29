-- Redlock, on one node: grant a read lock in the order of the key's line and issue this node's
-- fencing token (line.lua, which describes the keys, precedes this script). Curator's
-- InterProcessReadWriteLock rule: a reader goes when no writer holds the key and no live writer's
-- entry is ahead of its own in the line (readers ahead of it do not block it). A waiting reader
-- (ticket > 0) first takes its place in the line by ticket, so that every node judges it by the
-- same order; when not granted it keeps that place, marked as a reader, and a release wakes it by
-- its owner id (wakeFront). A single attempt (ticket 0) never joins, and any live writer's entry
-- blocks it. A granted reader leaves the line; its grant lives ttlMs among the readers, with this
-- node's token (issueToken: the same counter as writers'). A reader asking again (a lost reply)
-- is answered with its token, its grant refreshed.
-- A downgrade (heldWriter: the caller holds the write lock) passes that writer (its key and its
-- entry); any other writer holding the key or waiting in line would wait for the caller, or be
-- let in beside the reader, so the attempt is refused: nothing of it stays here.
-- A writer's lock-delay (line.lua: delayLeft) keeps readers out too: where no writer holds the
-- key and a delay is left (the last write grant ended without a release less than its D ago),
-- nobody reads until it ends.
-- Returns {1, token} granted; {0, ms} not granted, where ms bounds how long nothing may change
-- (the writer's PTTL, the delay left, or the first writer's entry time left); {-2} a downgrade
-- blocked.
local lockKey = KEYS[1]    -- the writer's "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]   -- the key's last token on this node (writers' and readers')
local queueKey = KEYS[3]   -- sorted set: waiting owners by ticket
local waitersKey = KEYS[4] -- hash: owner -> entry expiry (ms, TIME); owner:read -> '1'
local readersKey = KEYS[5] -- sorted set: reading owner -> grant expiry (ms, TIME)
local tokensKey = KEYS[6]  -- hash: reading owner -> its token
local owner = ARGV[1]      -- contender id (hex, no ':')
local ttlMs = ARGV[2]      -- lease length in whole milliseconds
local fenceTtlMs = ARGV[3] -- lifetime of the fence counter, ms (longer than ttlMs)
local ticket = ARGV[4]     -- µs the contender started waiting, on its clock; '0': single attempt
local waiterTtlMs = tonumber(ARGV[5]) -- entry lifetime past this attempt, ms
local heldWriter = ARGV[6] -- owner of the caller's write lock (a downgrade), or ''
local delayKey = KEYS[7]   -- a writer's lock-delay (line.lua); nil: none kept

-- The same reader asks again (its earlier reply was lost): refresh and answer again.
local mine = redis.call('HGET', tokensKey, owner)
if mine and tonumber(redis.call('ZSCORE', readersKey, owner) or '0') > nowMs() then
  holdRead(readersKey, tokensKey, owner, mine, ttlMs)
  leaveLine(queueKey, waitersKey, owner)
  return {1, mine}
end

-- Not yet: keep the place taken below, or, for a downgrade, withdraw (it would wait for itself).
local function notYet(ms)
  if heldWriter ~= '' then
    leaveLine(queueKey, waitersKey, owner)
    return {-2}
  end
  return {0, math.max(ms, 1)}
end

if ticket ~= '0' and heldWriter == '' then
  joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs, true)
end
local current = redis.call('GET', lockKey)
if current and string.sub(current, 1, string.find(current, ':', 1, true) - 1) ~= heldWriter then
  return notYet(redis.call('PTTL', lockKey))
end
-- No writer: a delay left by one that ended without a release keeps every reader out (a
-- downgrade's writer is gone then, so nothing of it blocks itself: it waits as any reader).
if not current then
  local delayed = delayLeft(delayKey)
  if delayed > 0 then return {0, delayed} end
end
-- The first live writer's entry ahead of this reader's (the whole line when it has none).
local writer, writerLeft
walkLine(queueKey, waitersKey, function(entry, left, reads)
  if entry == owner then return true end
  if not reads and entry ~= heldWriter then
    writer, writerLeft = entry, left
    return true
  end
  return false
end)
if writer then return notYet(writerLeft) end

leaveLine(queueKey, waitersKey, owner)
local token = issueToken(fenceKey, fenceTtlMs)
holdRead(readersKey, tokensKey, owner, token, ttlMs)
return {1, token}
