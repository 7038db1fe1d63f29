-- Grant a lock key to a writer in arrival order (single node) and issue its fencing token,
-- atomically (lock-line.lua, which describes the keys, and write-line.lua, the writer's rule,
-- precede this script). Waiters line up in a FIFO: a list of owner ids, head first, and a hash
-- of each entry's expiry (ms on the Redis clock, TIME) and of the ttlMs its owner asked for
-- ("<owner>:ttl"), with which a release hands the key to the head (line-handoff.lua). A key that
-- no writer and no reader holds goes to the head of the line, or to anyone when the line is
-- empty; a waiting contender that is not the head joins the tail (or keeps its place). A
-- contender that already holds the key (handed to it by a release whose message it has not
-- seen) is answered with its token.
-- An entry lives waiterTtlMs past its owner's latest attempt, so a waiter that vanished blocks
-- the line for at most that long; one that gives up is removed at once (queued-abandon.lua).
-- The fencing token is the larger of the key's last token + 1 and Redis's clock in microseconds
-- (TIME), so it keeps rising after the counter expired or the server restarted empty, as long as
-- the server's clock does not step back. The counter expires fenceTtlMs after the grant.
-- Readers cost a writer one EXISTS of the readers' key, and only when the key is free.
-- Lock-delay (lock-line.lua's delay key): a grant made with lockDelayMs D records it (and a
-- waiter's entry keeps it for a hand-over); while a grant that ended without a release is in its
-- delay, nobody is granted, whatever delay they carry.
-- Returns {1, token} when granted; {0, ms} when not, where ms bounds how long the key can stay
-- unavailable to this contender with nothing changing: the holder's PTTL, the lock-delay left,
-- the remaining entry time of the head of the line when the key is free but another waiter is
-- first, or the time until the last reader's grant ends.
local k = grantKeysAt(1)      -- lock, fence, queue, waiters, readers, readerTokens, delay
local owner = ARGV[1]         -- contender id (hex, no ':')
local ttlMs = ARGV[2]         -- lease length in whole milliseconds
local waiterTtlMs = tonumber(ARGV[3]) -- entry lifetime; 0: a single attempt, never queued
local fenceTtlMs = ARGV[4]    -- lifetime of the fence counter, ms (longer than ttlMs)
local delayMs = ARGV[5]       -- the grant's lock-delay, ms; absent or '0': none

-- The writer's rule (write-line.lua); a contender that may not go yet joins the tail of the line
-- or keeps its place there (a single attempt does neither).
local verdict, detail = writeVerdict(k, owner)
if verdict == 'busy' then return refuseWrite(k, owner, ttlMs, waiterTtlMs, detail, delayMs) end
return grantWrite(k, owner, ttlMs, fenceTtlMs, verdict, detail, delayMs)
