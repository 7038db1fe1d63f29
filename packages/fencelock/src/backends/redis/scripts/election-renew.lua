-- Extend a leader's grant (with its value) to ttlMs from now, only while this owner and term hold
-- it (never re-creates a grant that lapsed; election-line.lua describes the keys), and its
-- lock-delay with it: the delay key, when the grant has one, to ttlMs + the D it stores.
-- Returns 1 renewed, 0 not held (nobody leads), -1 another owner or term leads.
local leaderKey = KEYS[1]
local delayKey = KEYS[2]   -- the election's delay key (absent from older callers: not extended)
local expected = ARGV[1] .. ':' .. ARGV[2] .. ':'  -- "<owner>:<term>:"
local ttlMs = ARGV[3]

local current = redis.call('GET', leaderKey)
if not current then return 0 end
if string.sub(current, 1, #expected) ~= expected then return -1 end
redis.call('PEXPIRE', leaderKey, ttlMs)
if delayKey then
  local d = tonumber(redis.call('GET', delayKey) or '0')
  if d > 0 then redis.call('PEXPIRE', delayKey, tonumber(ttlMs) + d) end
end
return 1
