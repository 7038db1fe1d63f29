-- Extend a lease, only if this owner and token still hold it (never re-creates a vanished key).
-- Returns 1 renewed, 0 not held (key gone), -1 held by another owner or token.
local lockKey = KEYS[1]
local expected = ARGV[1] .. ':' .. ARGV[2]  -- "<owner>:<token>"
local ttlMs = ARGV[3]

local current = redis.call('GET', lockKey)
if not current then
  return 0
end
if current ~= expected then
  return -1
end
redis.call('PEXPIRE', lockKey, ttlMs)
return 1
