-- Extend many leases in one call (the watchdog's renewals of one turn), each with renew.lua's
-- rule: only while its owner and token still hold it, never re-creating a vanished key, its
-- lock-delay extended with it.
-- KEYS[i] (i = 1..n): a lock key; KEYS[n + i]: its delay key (all n absent from older callers:
-- no delay extended); ARGV[2i-1]: its expected "<owner>:<token>"; ARGV[2i]: its TTL, ms.
-- Returns one code per key, in order: 1 renewed, 0 not held, -1 held by another owner or token.
local n = #ARGV / 2
local withDelays = #KEYS == 2 * n
local codes = {}
for i = 1, n do
  local lockKey = KEYS[i]
  local current = redis.call('GET', lockKey)
  if not current then
    codes[i] = 0
  elseif current ~= ARGV[2 * i - 1] then
    codes[i] = -1
  else
    redis.call('PEXPIRE', lockKey, ARGV[2 * i])
    if withDelays then
      local d = tonumber(redis.call('GET', KEYS[n + i]) or '0')
      if d > 0 then redis.call('PEXPIRE', KEYS[n + i], tonumber(ARGV[2 * i]) + d) end
    end
    codes[i] = 1
  end
end
return codes
