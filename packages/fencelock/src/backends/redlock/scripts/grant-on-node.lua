-- Redlock, on one node: grant a lock key to an owner and issue this node's fencing token,
-- atomically (no line of waiters: a Redlock contender retries with jitter). The token is the
-- node's last token for the key + 1 while its counter lives, so the nodes of a quorum, whose
-- counters were settled to one value, agree without a second round; where the counter is gone
-- (a fresh key, the counter expired, the node restarted empty) it is the node's clock in whole
-- milliseconds, written in microseconds (ms × 1000: nodes that read the same millisecond agree
-- on a fresh key; others take the settle round). Either way it is above every token the node
-- issued for the key before, as long as its clock does not step back (a counter counts up from
-- a clock reading by one per grant, and grants of one key are further apart than 1 µs). The
-- counter expires fenceTtlMs after the grant.
-- Returns {1, token} when granted, {0, remaining PTTL of the holder} when held by another owner.
local lockKey = KEYS[1]   -- holds "<owner>:<token>" with a PX expiry
local fenceKey = KEYS[2]  -- the key's last token on this node; expires fenceTtlMs after a grant
local owner = ARGV[1]     -- contender id (hex, no ':')
local ttlMs = ARGV[2]     -- lease length in whole milliseconds
local fenceTtlMs = ARGV[3] -- lifetime of the fence counter, ms (longer than ttlMs)

local current = redis.call('GET', lockKey)
if current then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    -- The same owner asks again (its earlier reply was lost): refresh and answer again.
    redis.call('PEXPIRE', lockKey, ttlMs)
    return {1, string.sub(current, sep + 1)}
  end
  return {0, redis.call('PTTL', lockKey)}
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
