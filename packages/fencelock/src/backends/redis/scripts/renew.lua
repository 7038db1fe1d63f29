-- Extend a lease, only if this owner and token still hold it (never re-creates a vanished key),
-- and its lock-delay with it: the delay key (lock-line.lua), when the grant has one, to ttlMs +
-- the D it stores, so that it still outlives the grant by D.
-- Returns 1 renewed, 0 not held (key gone), -1 held by another owner or token.
local lockKey = KEYS[1]
local delayKey = KEYS[2]   -- the lock's delay key (absent from older callers: not extended)
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
if delayKey then
  local d = tonumber(redis.call('GET', delayKey) or '0')
  if d > 0 then redis.call('PEXPIRE', delayKey, tonumber(ttlMs) + d) end
end
return 1
