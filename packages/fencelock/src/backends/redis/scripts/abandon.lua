-- Withdraw a contender: delete the key if this owner holds it, whatever its token (used when an
-- attempt's reply came too late or was lost). Returns 1 deleted, 0 nothing of this owner's.
local lockKey = KEYS[1]
local channel = KEYS[2]
local owner = ARGV[1]

local current = redis.call('GET', lockKey)
if not current then
  return 0
end
local sep = string.find(current, ':', 1, true)
if string.sub(current, 1, sep - 1) ~= owner then
  return 0
end
redis.call('DEL', lockKey)
redis.call('PUBLISH', channel, string.sub(current, sep + 1))
return 1
