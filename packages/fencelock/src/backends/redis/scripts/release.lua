-- Compare-and-delete by owner and token, then announce the release to waiters.
-- Returns 1 released, 0 not held (key gone), -1 held by another owner or token (left untouched).
local lockKey = KEYS[1]
local channel = KEYS[2]                     -- release notifications for this key
local expected = ARGV[1] .. ':' .. ARGV[2]  -- "<owner>:<token>"

local current = redis.call('GET', lockKey)
if not current then
  return 0
end
if current ~= expected then
  return -1
end
redis.call('DEL', lockKey)
redis.call('PUBLISH', channel, ARGV[2])
return 1
