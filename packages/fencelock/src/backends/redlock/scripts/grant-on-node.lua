-- Redlock, on one node: grant a lock key to an owner and issue this node's fencing token,
-- atomically, in the order of the key's line (lineHead, line.lua, which precedes this script).
-- A free key goes to the head of the line, or to anyone when the line is empty; a waiting
-- contender (ticket > 0) that is not the head joins the line, or keeps its place and refreshes
-- its entry; a single attempt (ticket 0) never joins it. The token is the node's last token for
-- the key + 1 while its counter lives, so the nodes of a quorum, whose counters were settled to
-- one value, agree without a second round; where the counter is gone (a fresh key, the counter
-- expired, the node restarted empty) it is the node's clock in whole milliseconds, written in
-- microseconds (ms × 1000: nodes that read the same millisecond agree on a fresh key; others take
-- the settle round). Either way it is above every token the node issued for the key before, as
-- long as its clock does not step back (a counter counts up from a clock reading by one per
-- grant, and grants of one key are further apart than 1 µs). The counter expires fenceTtlMs
-- after the grant.
-- Returns {1, token} when granted; {0, ms} when not, where ms bounds how long the key can stay
-- unavailable to this contender with nothing changing: the holder's PTTL, the time the last
-- live reader has left, or the remaining entry time of the head of the line when the key is free
-- but another waiter is first. Live readers (read-grant-on-node.lua) keep a writer out: the one
-- check a plain write lock pays for them is an EXISTS of the readers' key (liveReaders).
-- Lock-delay (line.lua: recordDelay, delayLeft): with `delayKey`, a free key whose last grant
-- ended without a release less than its D ago is granted to nobody, the head of the line
-- included ({0, delay left}; a waiter keeps its place); a grant with `lockDelayMs` > 0 records
-- its delay beside it, and the holder asking again moves it with the grant.
local lockKey = KEYS[1]    -- holds "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]   -- the key's last token on this node; expires fenceTtlMs after a grant
local queueKey = KEYS[3]   -- sorted set: waiting owners by ticket
local waitersKey = KEYS[4] -- hash: owner -> entry expiry (ms, TIME); owner:read -> '1'
local readersKey = KEYS[5] -- sorted set: reading owner -> grant expiry (ms, TIME)
local tokensKey = KEYS[6]  -- hash: reading owner -> its token
local owner = ARGV[1]      -- contender id (hex, no ':')
local ttlMs = ARGV[2]      -- lease length in whole milliseconds
local fenceTtlMs = ARGV[3] -- lifetime of the fence counter, ms (longer than ttlMs)
local ticket = ARGV[4]     -- µs the contender started waiting, on its clock; '0': single attempt
local waiterTtlMs = tonumber(ARGV[5]) -- entry lifetime past this attempt, ms
local delayKey = KEYS[7]   -- "<owner>:<D>" with PX = grant's TTL + D (line.lua); nil: no delay
local lockDelayMs = ARGV[6] or '0' -- this grant's lock-delay, ms; '0': none

-- A waiting contender joins the line, or keeps its place; a single attempt never does.
local function enqueue()
  if ticket ~= '0' then joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs, false) end
end

local current = redis.call('GET', lockKey)
if current then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    -- The same owner asks again (its earlier reply was lost): refresh and answer again.
    redis.call('PEXPIRE', lockKey, ttlMs)
    moveDelay(delayKey, owner, ttlMs, lockDelayMs)
    return {1, string.sub(current, sep + 1)}
  end
  enqueue()
  return {0, redis.call('PTTL', lockKey)}
end

-- The last grant ended without a release less than its delay ago: nobody goes until it ends.
local delayed = delayLeft(delayKey)
if delayed > 0 then
  enqueue()
  return {0, delayed}
end

-- Readers hold the key: wait until the last of them is gone.
local readers, readersLeft = liveReaders(readersKey, tokensKey)
if readers > 0 then
  enqueue()
  return {0, math.max(readersLeft, 1)}
end

-- Free: the head of the line goes first. A waiter whose entry this node lacked (an earlier
-- attempt did not reach it) takes its place by ticket, and may be the head then.
local first, left = lineHead(queueKey, waitersKey)
if first and first ~= owner then
  if ticket == '0' then return {0, left} end
  enqueue()
  first, left = lineHead(queueKey, waitersKey)
  if first ~= owner then return {0, left} end
end
-- The head keeps its entry while it holds the key here: its vote may still fail on the other
-- nodes, and it must find its place on each of them again. Its release takes it out (or the
-- entry lapses, as renewals do not refresh it).

-- Issue the token and set the key in the same script, so no grant goes without a token.
local token = issueToken(fenceKey, fenceTtlMs)
redis.call('SET', lockKey, owner .. ':' .. token, 'NX', 'PX', ttlMs)
recordDelay(delayKey, owner, ttlMs, lockDelayMs)
return {1, token}
