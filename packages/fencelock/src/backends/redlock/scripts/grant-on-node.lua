-- Redlock, on one node: grant a lock key to an owner and issue this node's fencing token,
-- atomically, serving the key's waiters in the order of their places. The token is the node's
-- last token for the key + 1 while its counter lives, so the nodes of a quorum, whose counters
-- were settled to one value, agree without a second round; where the counter is gone (a fresh
-- key, the counter expired, the node restarted empty) it is the node's clock in whole
-- milliseconds, written in microseconds (ms × 1000: nodes that read the same millisecond agree
-- on a fresh key; others take the settle round). Either way it is above every token the node
-- issued for the key before, as long as its clock does not step back (a counter counts up from
-- a clock reading by one per grant, and grants of one key are further apart than 1 µs). The
-- counter expires fenceTtlMs after the grant.
--
-- The line of waiters: a sorted set of owners scored by the place each contender chose once for
-- its whole acquire (the same on every node, so every node that has the same entries orders
-- them alike and a vote cannot stay split between heads), and a hash of each entry's expiry (ms
-- on this node's clock, TIME). A free key goes to the head of the line, or to anyone when the
-- line is empty; a waiting contender that is not the head joins the line (or refreshes its
-- entry, keeping its place). An entry lives waiterTtlMs past its owner's latest attempt.
-- Returns {1, token} when granted; {0, ms} when not, where ms bounds how long the key can stay
-- unavailable to this contender with nothing changing: the holder's PTTL, or the remaining entry
-- time of the head of the line when the key is free but another waiter is first.
local lockKey = KEYS[1]     -- holds "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]    -- the key's last token on this node; expires fenceTtlMs after a grant
local queueKey = KEYS[3]    -- sorted set: waiting owner -> place
local waitersKey = KEYS[4]  -- hash: waiting owner -> entry expiry (ms, TIME)
local owner = ARGV[1]       -- contender id (hex, no ':')
local ttlMs = ARGV[2]       -- lease length in whole milliseconds
local fenceTtlMs = ARGV[3]  -- lifetime of the fence counter, ms (longer than ttlMs)
local waiterTtlMs = tonumber(ARGV[4]) -- entry lifetime; 0: a single attempt, never queued
local place = ARGV[5]       -- the contender's place in line (smaller first; ties by owner id)

-- This node's clock in ms, read once, only when needed.
local nowMs
local function now()
  if not nowMs then
    local time = redis.call('TIME')
    nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return nowMs
end

-- Join the line at one's place, or refresh one's entry; both keys outlive the newest entry.
local function enqueue()
  if waiterTtlMs <= 0 then return end
  redis.call('HSET', waitersKey, owner, now() + waiterTtlMs)
  redis.call('ZADD', queueKey, place, owner)
  if redis.call('PTTL', queueKey) < waiterTtlMs then redis.call('PEXPIRE', queueKey, waiterTtlMs) end
  if redis.call('PTTL', waitersKey) < waiterTtlMs then redis.call('PEXPIRE', waitersKey, waiterTtlMs) end
end

-- The head of the line after dropping expired entries there: owner and ms it has left, or nil.
local function head()
  while true do
    local first = redis.call('ZRANGE', queueKey, 0, 0)[1]
    if not first then return nil, 0 end
    local expiresAt = tonumber(redis.call('HGET', waitersKey, first) or '0')
    if expiresAt > now() then return first, expiresAt - now() end
    redis.call('ZREM', queueKey, first)
    redis.call('HDEL', waitersKey, first)
  end
end

local current = redis.call('GET', lockKey)
if current then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    -- The same owner asks again (its earlier reply was lost): refresh and answer again.
    redis.call('PEXPIRE', lockKey, ttlMs)
    return {1, string.sub(current, sep + 1)}
  end
  enqueue()
  return {0, redis.call('PTTL', lockKey)}
end

-- Free: with a line, its head goes first (a contender joins before the head is read, so that
-- one whose place is first is served at once); a contender behind it waits its turn.
if redis.call('EXISTS', queueKey) == 1 then
  enqueue()
  local first, left = head()
  if first and first ~= owner then return {0, left} end
  if first then
    redis.call('ZREM', queueKey, owner)
    redis.call('HDEL', waitersKey, owner)
  end
end

-- Free: issue the token and set the key in the same script, so no grant goes without a token.
-- Below 2^53 (microseconds until the year 2255), exact in Lua's doubles; '%d' writes every digit.
local last = redis.call('GET', fenceKey)
local token
if last then
  token = string.format('%d', tonumber(last) + 1)
else
  local time = redis.call('TIME')
  token = string.format('%d', tonumber(time[1]) * 1000000 + math.floor(tonumber(time[2]) / 1000) * 1000)
end
redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
redis.call('SET', lockKey, owner .. ':' .. token, 'NX', 'PX', ttlMs)
return {1, token}
