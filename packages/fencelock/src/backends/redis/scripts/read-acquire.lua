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
-- A writer's lock-delay (lock-line.lua's delay key) keeps readers out too, until it ends.
-- Returns {1, token} granted; {0, ms} not granted, where ms bounds how long nothing may change
-- (the writer's PTTL, the lock-delay left, or the first writer's entry time left); {-2} a
-- downgrade blocked.
local k = grantKeysAt(1)      -- lock, fence, queue, waiters, readers, readerTokens, delay
local owner = ARGV[1]         -- contender id (hex, no ':')
local ttlMs = ARGV[2]         -- lease length in whole milliseconds
local waiterTtlMs = tonumber(ARGV[3]) -- entry lifetime; 0: a single attempt, never queued
local fenceTtlMs = ARGV[4]    -- lifetime of the fence counter, ms (longer than ttlMs)
local heldWriter = ARGV[5]    -- owner of the caller's write lock (a downgrade), or ''

-- The reader's rule (read-line.lua). Not yet: wait in line, or, for a downgrade, withdraw (it
-- would wait for itself).
local verdict, detail = readVerdict(k, owner, heldWriter)
if verdict == 'busy' then return refuseRead(k, owner, ttlMs, waiterTtlMs, heldWriter, detail) end
return grantRead(k, owner, ttlMs, fenceTtlMs, verdict, detail)
