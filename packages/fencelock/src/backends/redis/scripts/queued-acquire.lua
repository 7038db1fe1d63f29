-- Grant a lock key in arrival order (single node) and issue its fencing token, atomically.
-- Waiters line up in a FIFO: a list of owner ids, head first, and a hash of each entry's expiry
-- (ms on the Redis clock, TIME) and of the ttlMs its owner asked for ("<owner>:ttl"), with which
-- a release hands the key to the head (line-handoff.lua). A free key goes to the head of the
-- line, or to anyone when the line is empty; a waiting contender that is not the head joins the
-- tail (or keeps its place). A contender that already holds the key (handed to it by a release
-- whose message it has not seen) is answered with its token.
-- An entry lives waiterTtlMs past its owner's latest attempt, so a waiter that vanished blocks
-- the line for at most that long; one that gives up is removed at once (queued-abandon.lua).
-- The fencing token is the larger of the key's last token + 1 and Redis's clock in microseconds
-- (TIME), so it keeps rising after the counter expired or the server restarted empty, as long as
-- the server's clock does not step back. The counter expires fenceTtlMs after the grant.
-- Returns {1, token} when granted; {0, ms} when not, where ms bounds how long the key can stay
-- unavailable to this contender with nothing changing: the holder's PTTL, or the remaining entry
-- time of the head of the line when the key is free but another waiter is first.
local lockKey = KEYS[1]     -- holds "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]    -- the key's last token; expires fenceTtlMs after its grant
local queueKey = KEYS[3]    -- list of waiting owners, head first
local waitersKey = KEYS[4]  -- hash: owner -> entry expiry (ms, Redis TIME); owner:ttl -> ttlMs
local owner = ARGV[1]       -- contender id (hex, no ':')
local ttlMs = ARGV[2]       -- lease length in whole milliseconds
local waiterTtlMs = tonumber(ARGV[3]) -- entry lifetime; 0: a single attempt, never queued
local fenceTtlMs = ARGV[4]  -- lifetime of the fence counter, ms (longer than ttlMs)

-- Redis's own clock ({seconds, microseconds}), read once, only when needed.
local clock
local function time()
  if not clock then clock = redis.call('TIME') end
  return clock
end
-- The clock in ms.
local function now()
  return tonumber(time()[1]) * 1000 + math.floor(tonumber(time()[2]) / 1000)
end

-- The head of the line after dropping expired entries there: owner and ms it has left, or nil.
local function head()
  while true do
    local first = redis.call('LINDEX', queueKey, 0)
    if not first then return nil, 0 end
    local expiresAt = tonumber(redis.call('HGET', waitersKey, first) or '0')
    if expiresAt > now() then return first, expiresAt - now() end
    redis.call('LPOP', queueKey)
    redis.call('HDEL', waitersKey, first, first .. ':ttl')
  end
end

-- Join the tail, or keep one's place and refresh the entry (and the TTL a handed grant is made
-- for); both keys outlive the newest entry.
local function enqueue()
  if waiterTtlMs <= 0 then return end
  if redis.call('HSET', waitersKey, owner, now() + waiterTtlMs) == 1 then
    redis.call('RPUSH', queueKey, owner)
  end
  redis.call('HSET', waitersKey, owner .. ':ttl', ttlMs)
  if redis.call('PTTL', queueKey) < waiterTtlMs then redis.call('PEXPIRE', queueKey, waiterTtlMs) end
  if redis.call('PTTL', waitersKey) < waiterTtlMs then redis.call('PEXPIRE', waitersKey, waiterTtlMs) end
end

local current = redis.call('GET', lockKey)
if current then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    -- The same owner asks again (its earlier reply was lost, or a release handed it the key and
    -- the message has not reached it): refresh and answer again.
    redis.call('PEXPIRE', lockKey, ttlMs)
    return {1, string.sub(current, sep + 1)}
  end
  enqueue()
  return {0, redis.call('PTTL', lockKey)}
end

-- Free: the head of the line goes first; a contender behind it waits its turn.
local first, left = head()
if first and first ~= owner then
  enqueue()
  return {0, left}
end
if first then
  redis.call('LPOP', queueKey)
  redis.call('HDEL', waitersKey, owner, owner .. ':ttl')
end

-- Issue the token and set the key in the same script, so no grant goes without a token. Both
-- numbers stay below 2^53 (microseconds until the year 2255), exact in Lua's doubles; '%d'
-- writes all digits (tostring and '..' would round to 14 significant digits).
local last = tonumber(redis.call('GET', fenceKey) or '0')
local clockUs = tonumber(time()[1]) * 1000000 + tonumber(time()[2])
local token = string.format('%d', math.max(last + 1, clockUs))
redis.call('SET', fenceKey, token, 'PX', fenceTtlMs)
redis.call('SET', lockKey, owner .. ':' .. token, 'PX', ttlMs)
return {1, token}
