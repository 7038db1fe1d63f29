-- Redlock, on one node: withdraw a contender, deleting the key if this owner holds it, whatever
-- its token (used when a vote failed, or an attempt's reply came too late or was lost).
-- Returns 1 deleted, 0 nothing of this owner's.
local lockKey = KEYS[1]
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
return 1
