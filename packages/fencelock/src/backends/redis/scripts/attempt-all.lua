-- Single attempts at several locks in one script, every one granted or none (the backend's
-- `attemptAll`, the first round of a multi-key acquire). Each lock gets the single attempt of
-- queued-acquire.lua (writers) or read-acquire.lua (readers) with waiterTtlMs 0, by the same
-- rules (write-line.lua, read-line.lua, after lock-line.lua): every lock is decided before any is
-- granted, and nothing joins a line. Tokens come from each lock's own counter (nextToken), as a
-- single attempt's do. All keys must be on this server (single node, Sentinel) or in one hash slot
-- (Cluster: the backend checks that before it sends).
-- KEYS: seven per lock (grantKeysAt, its delay key included), lock i from KEYS[7 * (i - 1) + 1].
-- ARGV: mode ('write' or 'read'), ttlMs, fenceTtlMs for every lock; then per lock its owner,
-- heldWriter (the owner of the caller's write lock for a read downgrade, or '') and lock-delay
-- (ms, '0' for none; a writer's grant records it as queued-acquire.lua's does). A lock in the
-- lock-delay of a grant that ended without a release refuses, as its single attempt would.
-- Returns one reply per lock, in order: all {1, token} when every lock was granted; else nothing
-- was granted and each lock is answered {0, ms} or {-2} (it refused, as its single attempt would
-- answer), or {-1} (free, not taken because another lock refused).
local reads = ARGV[1] == 'read'
local ttlMs = ARGV[2]         -- lease length in whole milliseconds
local fenceTtlMs = ARGV[3]    -- lifetime of each fence counter, ms (longer than ttlMs)
local count = #KEYS / 7
if count ~= math.floor(count) or #ARGV ~= 3 + 3 * count then
  return redis.error_reply('attempt-all: 7 keys and 3 arguments per lock expected')
end

local locks = {}
local refused = false
for i = 1, count do
  local lock = {
    k = grantKeysAt(7 * (i - 1) + 1),
    owner = ARGV[1 + 3 * i],
    heldWriter = ARGV[2 + 3 * i],
    delayMs = ARGV[3 + 3 * i],
  }
  if reads then
    lock.verdict, lock.detail = readVerdict(lock.k, lock.owner, lock.heldWriter)
  else
    lock.verdict, lock.detail = writeVerdict(lock.k, lock.owner)
  end
  if lock.verdict == 'busy' then refused = true end
  locks[i] = lock
end

local replies = {}
for i, lock in ipairs(locks) do
  if not refused and reads then
    replies[i] = grantRead(lock.k, lock.owner, ttlMs, fenceTtlMs, lock.verdict, lock.detail)
  elseif not refused then
    replies[i] =
      grantWrite(lock.k, lock.owner, ttlMs, fenceTtlMs, lock.verdict, lock.detail, lock.delayMs)
  elseif lock.verdict ~= 'busy' then
    replies[i] = {-1}
  elseif reads then
    replies[i] = refuseRead(lock.k, lock.owner, ttlMs, 0, lock.heldWriter, lock.detail)
  else
    replies[i] = refuseWrite(lock.k, lock.owner, ttlMs, 0, lock.detail)
  end
end
return replies
