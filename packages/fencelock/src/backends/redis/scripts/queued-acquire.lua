-- Grant a lock key to a writer in arrival order (single node) and issue its fencing token,
-- atomically (lock-line.lua precedes this script and describes the keys). Waiters line up in a
-- FIFO: a list of owner ids, head first, and a hash of each entry's expiry (ms on the Redis
-- clock, TIME) and of the ttlMs its owner asked for ("<owner>:ttl"), with which a release hands
-- the key to the head (line-handoff.lua). A key that no writer and no reader holds goes to the
-- head of the line, or to anyone when the line is empty; a waiting contender that is not the head
-- joins the tail (or keeps its place). A contender that already holds the key (handed to it by a
-- release whose message it has not seen) is answered with its token.
-- An entry lives waiterTtlMs past its owner's latest attempt, so a waiter that vanished blocks
-- the line for at most that long; one that gives up is removed at once (queued-abandon.lua).
-- The fencing token is the larger of the key's last token + 1 and Redis's clock in microseconds
-- (TIME), so it keeps rising after the counter expired or the server restarted empty, as long as
-- the server's clock does not step back. The counter expires fenceTtlMs after the grant.
-- Readers cost a writer one EXISTS of the readers' key, and only when the key is free.
-- Returns {1, token} when granted; {0, ms} when not, where ms bounds how long the key can stay
-- unavailable to this contender with nothing changing: the holder's PTTL, the remaining entry
-- time of the head of the line when the key is free but another waiter is first, or the time
-- until the last reader's grant ends.
local lockKey = KEYS[1]       -- holds "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]      -- the key's last token; expires fenceTtlMs after its grant
local queueKey = KEYS[3]      -- list of waiting owners, head first
local waitersKey = KEYS[4]    -- hash: owner -> entry expiry (ms, Redis TIME); owner:ttl -> ttlMs
local readersKey = KEYS[5]    -- sorted set: reading owner -> grant expiry (ms, Redis TIME)
local tokensKey = KEYS[6]     -- hash: reading owner -> its token
local owner = ARGV[1]         -- contender id (hex, no ':')
local ttlMs = ARGV[2]         -- lease length in whole milliseconds
local waiterTtlMs = tonumber(ARGV[3]) -- entry lifetime; 0: a single attempt, never queued
local fenceTtlMs = ARGV[4]    -- lifetime of the fence counter, ms (longer than ttlMs)

local current = redis.call('GET', lockKey)
if current then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    -- The same owner asks again (its earlier reply was lost, or a release handed it the key and
    -- the message has not reached it): refresh and answer again.
    redis.call('PEXPIRE', lockKey, ttlMs)
    return {1, string.sub(current, sep + 1)}
  end
  enqueue(queueKey, waitersKey, owner, ttlMs, waiterTtlMs, false)
  return {0, redis.call('PTTL', lockKey)}
end

-- Free of writers: the head of the line goes first; a contender behind it waits its turn.
local first, left = headOfLine(queueKey, waitersKey)
if first and first ~= owner then
  enqueue(queueKey, waitersKey, owner, ttlMs, waiterTtlMs, false)
  return {0, left}
end
-- Readers share the key; a writer waits until the last of them is gone (keeping its place).
local readers, readersLeft = liveReaders(readersKey, tokensKey)
if readers > 0 then
  enqueue(queueKey, waitersKey, owner, ttlMs, waiterTtlMs, false)
  return {0, math.max(readersLeft, 1)}
end
if first then leaveLine(queueKey, waitersKey, owner) end

-- Issue the token and set the key in the same script, so no grant goes without a token.
local token = nextToken(fenceKey, fenceTtlMs)
redis.call('SET', lockKey, owner .. ':' .. token, 'PX', ttlMs)
return {1, token}
