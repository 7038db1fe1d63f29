-- Redlock, on one node: extend many leaderships in one call (the watchdog's renewals of one turn;
-- election-line.lua precedes this script), each only while its owner and term still lead here,
-- never re-creating a grant that lapsed; the value lives on with the grant, and its lock-delay
-- moves with it (moveDelay, line.lua). KEYS[2i-1]: an election's leader hash, KEYS[2i] its
-- lock-delay key; ARGV[3i-2] its owner, ARGV[3i-1] its term, ARGV[3i] its TTL, ms.
-- Returns one code per leadership, in order: 1 renewed, 0 nobody leads, -1 another owner or term.
local codes = {}
for i = 1, #KEYS / 2 do
  local owner, term, ttlMs = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local holder, held = leaderOf(KEYS[2 * i - 1])
  if holder == owner and held == term then
    redis.call('PEXPIRE', KEYS[2 * i - 1], ttlMs)
    moveDelay(KEYS[2 * i], owner, ttlMs, '0')
    codes[i] = 1
  elseif holder then
    codes[i] = -1
  else
    codes[i] = 0
  end
end
return codes
