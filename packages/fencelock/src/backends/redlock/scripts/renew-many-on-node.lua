-- Redlock, on one node: extend many leases of either mode in one call (the watchdog's renewals of
-- one turn), each only while its owner and token still hold it, never re-creating a grant that
-- lapsed (line.lua precedes this script): the writer's key when "<owner>:<token>" holds it (the
-- one GET a plain write lock pays, and one GET of its lock-delay key), moving the writer's
-- lock-delay with it (moveDelay: its D past the renewed end), else the owner's live read grant
-- when its token matches.
-- KEYS[4i-3], KEYS[4i-2], KEYS[4i-1], KEYS[4i]: a lock's key, readers, reader tokens and
-- lock-delay; ARGV[3i-2] its owner, ARGV[3i-1] its token, ARGV[3i] its TTL, ms.
-- Returns one code per lease, in order: 1 renewed, 0 not held (no writer, no live reader), -1 this
-- owner and token hold nothing while someone holds the key.
local codes = {}
for i = 1, #KEYS / 4 do
  local lockKey, readersKey, tokensKey = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1]
  local owner, token, ttlMs = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local current = redis.call('GET', lockKey)
  if current == owner .. ':' .. token then
    redis.call('PEXPIRE', lockKey, ttlMs)
    moveDelay(KEYS[4 * i], owner, ttlMs, '0')
    codes[i] = 1
  else
    local readers = liveReaders(readersKey, tokensKey)
    if readers > 0 and redis.call('HGET', tokensKey, owner) == token then
      holdRead(readersKey, tokensKey, owner, token, ttlMs)
      codes[i] = 1
    elseif current or readers > 0 then
      codes[i] = -1
    else
      codes[i] = 0
    end
  end
end
return codes
