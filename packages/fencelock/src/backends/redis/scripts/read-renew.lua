-- Extend a lease that may be a reader's to ttlMs from now (lock-line.lua, which describes the
-- keys, and read-line.lua precede this script), only while its owner and token still hold it,
-- never re-creating a grant that lapsed: the writer's key when "<owner>:<token>" holds it (as
-- renew.lua, its lock-delay with it), else the owner's entry among the live readers when its
-- token matches. Readers are renewed one call each (renew-many.lua knows writers only), which
-- also runs on a Cluster.
-- Returns 1 renewed; 0 not held (no writer and no live reader); -1 this owner and token hold
-- nothing while someone holds the key.
local lockKey = KEYS[1]     -- the writer's "<owner>:<token>" with a PX expiry
local readersKey = KEYS[2]  -- sorted set: reading owner -> grant expiry (ms, Redis TIME)
local tokensKey = KEYS[3]   -- hash: reading owner -> its token
local delayKey = KEYS[4]    -- the writer's lock-delay (absent from older callers: not extended)
local owner, token, ttlMs = ARGV[1], ARGV[2], ARGV[3]

local current = redis.call('GET', lockKey)
if current == owner .. ':' .. token then
  redis.call('PEXPIRE', lockKey, ttlMs)
  holdDelay(delayKey, ttlMs, nil)
  return 1
end
local readers = liveReaders(readersKey, tokensKey)
if redis.call('HGET', tokensKey, owner) == token then
  holdRead(readersKey, tokensKey, owner, token, ttlMs)
  return 1
end
if current or readers > 0 then return -1 end
return 0
