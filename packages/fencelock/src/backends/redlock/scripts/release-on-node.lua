-- Redlock, on one node: compare-and-delete by owner and token.
-- Returns 1 released, 0 not held (key gone), -1 held by another owner or token (left untouched).
local lockKey = KEYS[1]
local expected = ARGV[1] .. ':' .. ARGV[2]  -- "<owner>:<token>"

local current = redis.call('GET', lockKey)
if not current then
  return 0
end
if current ~= expected then
  return -1
end
redis.call('DEL', lockKey)
return 1
