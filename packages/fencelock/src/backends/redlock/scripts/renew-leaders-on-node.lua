-- Redlock, on one node: extend many leaderships in one call (the watchdog's renewals of one turn;
-- election-line.lua precedes this script), each only while its owner and term still lead here,
-- never re-creating a grant that lapsed; the value lives on with the grant. KEYS[i]: an
-- election's leader hash; ARGV[3i-2] its owner, ARGV[3i-1] its term, ARGV[3i] its TTL, ms.
-- Returns one code per leadership, in order: 1 renewed, 0 nobody leads, -1 another owner or term.
local codes = {}
for i = 1, #KEYS do
  local owner, term, ttlMs = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local holder, held = leaderOf(KEYS[i])
  if holder == owner and held == term then
    redis.call('PEXPIRE', KEYS[i], ttlMs)
    codes[i] = 1
  elseif holder then
    codes[i] = -1
  else
    codes[i] = 0
  end
end
return codes
