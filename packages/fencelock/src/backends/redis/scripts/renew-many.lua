-- Extend many leases in one call (the watchdog's renewals of one turn), each with renew.lua's
-- rule: only while its owner and token still hold it, never re-creating a vanished key.
-- KEYS[i]: a lock key; ARGV[2i-1]: its expected "<owner>:<token>"; ARGV[2i]: its TTL, ms.
-- Returns one code per key, in order: 1 renewed, 0 not held, -1 held by another owner or token.
local codes = {}
for i, lockKey in ipairs(KEYS) do
  local current = redis.call('GET', lockKey)
  if not current then
    codes[i] = 0
  elseif current ~= ARGV[2 * i - 1] then
    codes[i] = -1
  else
    redis.call('PEXPIRE', lockKey, ARGV[2 * i])
    codes[i] = 1
  end
end
return codes
