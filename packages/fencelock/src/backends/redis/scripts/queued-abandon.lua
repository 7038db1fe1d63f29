-- Withdraw a contender (single node, with a line of waiters): delete the key if this owner holds
-- it, whatever its token (unless keepGrant), and take the owner out of the line. When that frees
-- the key or removes the head of the line, wake the (new) head by publishing its owner id.
-- Returns 1 deleted this owner's key, 0 nothing of this owner's held the key (or keepGrant).
local lockKey = KEYS[1]
local channel = KEYS[2]
local queueKey = KEYS[3]
local waitersKey = KEYS[4]
local owner = ARGV[1]
local keepGrant = ARGV[2] == '1' -- '1': leave the line only, never delete a grant

local deleted = 0
local current = redis.call('GET', lockKey)
if current and not keepGrant then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    redis.call('DEL', lockKey)
    current = false
    deleted = 1
  end
end

local wasHead = redis.call('LINDEX', queueKey, 0) == owner
if redis.call('HDEL', waitersKey, owner) == 1 then
  redis.call('LREM', queueKey, 1, owner)
end

if not current and (deleted == 1 or wasHead) then
  local now
  while true do
    local first = redis.call('LINDEX', queueKey, 0)
    if not first then break end
    if not now then
      local time = redis.call('TIME')
      now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    end
    if tonumber(redis.call('HGET', waitersKey, first) or '0') > now then
      redis.call('PUBLISH', channel, first)
      break
    end
    redis.call('LPOP', queueKey)
    redis.call('HDEL', waitersKey, first)
  end
end
return deleted
