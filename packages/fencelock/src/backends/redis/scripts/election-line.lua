-- Shared fragment of the election scripts (scripts.ts puts it after lock-line.lua, whose clock
-- functions it uses). An election is a third object of a key, apart from its lock and its
-- semaphore (lock-keys.ts, electionKeys), its keys all under the key's hash tag:
--   leader   "<owner>:<term>:<value>" of the candidate that leads, with a PX expiry: the grant
--            and the leader's value live and expire as one string (owners are hex and terms
--            decimal, so the value is everything after the second ':')
--   term     the election's last term (its fencing counter), kept WITHOUT expiry: unlike a
--            lock's fence counter it must outlive any idle time (fence-counter.ts)
--   queue    list of waiting candidates, head first (FIFO)
--   waiters  hash: "<owner>" -> its entry's expiry (ms, Redis TIME); "<owner>:ttl" -> the ttlMs
--            it asked for (a hand-over grants it that); "<owner>:value" -> its value
--   channel  the election's channel: a hand-over publishes "<owner>:<term>:<first TTL>" (the
--            release-waiters format), every other change of the leader or its value "*"
--   delay    the leadership's lock-delay D (ms), with a PX expiry of the grant's remaining TTL +
--            D, as a lock's delay key (lock-line.lua): written with the grant, extended by its
--            renewals, deleted by a resignation of the live grant; while it outlives the leader
--            key nobody is granted. "<owner>:delay" in waiters: a waiting candidate's D.

-- The keys of an election as its scripts receive them, six from KEYS[first] on (a caller that
-- passes five, written before lock-delay, leaves `delay` nil: no delay checked or recorded).
local function electionKeysAt(first)
  return {
    leader = KEYS[first], term = KEYS[first + 1], queue = KEYS[first + 2],
    waiters = KEYS[first + 3], channel = KEYS[first + 4], delay = KEYS[first + 5],
  }
end

-- The next term: the larger of the last term + 1 and the clock in µs (as a lock's nextToken), in
-- a counter that never expires, so terms rise after any idle time, and after a restart that lost
-- the counter while the clock does not step back.
local function nextTerm(termKey)
  local last = tonumber(redis.call('GET', termKey) or '0')
  local term = string.format('%d', math.max(last + 1, nowUs()))
  redis.call('SET', termKey, term)
  return term
end

-- "<owner>:<term>:" of a grant string, its owner and its term.
local function grantHead(grant)
  local first = string.find(grant, ':', 1, true)
  local second = string.find(grant, ':', first + 1, true)
  return string.sub(grant, 1, second), string.sub(grant, 1, first - 1), string.sub(grant, first + 1, second - 1)
end

-- Take `owner`'s entry, with its value, out of the line (no-op when it has none).
local function dropCandidate(e, owner)
  local fields = {owner, owner .. ':ttl', owner .. ':value', owner .. ':delay'}
  if redis.call('HDEL', e.waiters, unpack(fields)) > 0 then
    redis.call('LREM', e.queue, 1, owner)
  end
end

-- The first live candidate of the line and the ms its entry has left; entries whose time ran out
-- (their owners vanished) are dropped from the head on the way. nil when the line is empty.
local function headCandidate(e)
  while true do
    local first = redis.call('LINDEX', e.queue, 0)
    if not first then return nil end
    local left = tonumber(redis.call('HGET', e.waiters, first) or '0') - nowMs()
    if left > 0 then return first, left end
    redis.call('LPOP', e.queue)
    redis.call('HDEL', e.waiters, first, first .. ':ttl', first .. ':value', first .. ':delay')
  end
end

-- Join the tail of the line, or keep one's place and refresh the entry (its TTL, value and
-- lock-delay); both keys outlive the newest entry. waiterTtlMs 0: a single attempt, never queued.
local function joinLine(e, owner, ttlMs, value, waiterTtlMs, delayMs)
  if waiterTtlMs <= 0 then return end
  if redis.call('HSET', e.waiters, owner, nowMs() + waiterTtlMs) == 1 then
    redis.call('RPUSH', e.queue, owner)
  end
  redis.call('HSET', e.waiters, owner .. ':ttl', ttlMs, owner .. ':value', value)
  if (tonumber(delayMs or '0') or 0) > 0 then
    redis.call('HSET', e.waiters, owner .. ':delay', delayMs)
  end
  if redis.call('PTTL', e.queue) < waiterTtlMs then redis.call('PEXPIRE', e.queue, waiterTtlMs) end
  if redis.call('PTTL', e.waiters) < waiterTtlMs then redis.call('PEXPIRE', e.waiters, waiterTtlMs) end
end

-- Make `owner` the leader with a new term for ttlMs, publishing `value`, with its lock-delay
-- (delayMs > 0, holdDelay); returns the term.
local function grantLeader(e, owner, ttlMs, value, delayMs)
  dropCandidate(e, owner)
  local term = nextTerm(e.term)
  redis.call('SET', e.leader, owner .. ':' .. term .. ':' .. value, 'PX', ttlMs)
  if (tonumber(delayMs or '0') or 0) > 0 then holdDelay(e.delay, ttlMs, delayMs) end
  return term
end

-- The election has no leader now: grant the head of the line (if any) with its value and
-- lock-delay for a first TTL of min(its ttlMs, capMs) and publish "<owner>:<term>:<first TTL>"
-- (the waiter holds it on receipt and renews it to its full TTL, as a lock's line-handoff.lua);
-- else, or while the election is in the lock-delay of a leadership that ended without a
-- resignation (nobody is granted before it ends; the candidates attempt again then), publish "*".
local function handOver(e, capMs)
  local first
  if delayLeft(e.delay) == 0 then first = headCandidate(e) end
  if first then
    local fields =
      redis.call('HMGET', e.waiters, first .. ':ttl', first .. ':value', first .. ':delay')
    local ttlMs = tonumber(fields[1] or '0')
    if ttlMs > 0 and fields[2] then
      local firstTtlMs = string.format('%d', math.min(ttlMs, capMs))
      local term = grantLeader(e, first, firstTtlMs, fields[2], fields[3])
      redis.call('PUBLISH', e.channel, first .. ':' .. term .. ':' .. firstTtlMs)
      return
    end
  end
  redis.call('PUBLISH', e.channel, '*')
end
