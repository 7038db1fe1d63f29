-- Read the holders and the line of several locks and semaphores, each in this one atomic step,
-- for one page of `list` (listing.ts). Read-only: expired readers, permits and line entries are
-- skipped, never removed. Time from Redis TIME.
--   ARGV[i]  what the i-th object is, by the key name SCAN found: 'w' a lock's writer key
--            (lock-line.lua's `lock`), 'r' a lock's readers, 'p' a semaphore's holders
--   KEYS     five per object, from KEYS[5i-4]: for a lock lock, readers, readerTokens, queue,
--            waiters (lock-line.lua); for a semaphore holders, tokens, permits, queue, waiters
--            (semaphore-line.lua)
-- Returns one reply per object:
--   {0}                                         no live holder (or, for 'r', a writer holds the
--                                               key: its 'w' reports it)
--   {1, "<owner>:<counter>", PTTL, waiters}     a writer
--   {2, {owner, counter, ms left, ...}, waiters}  the live readers
--   {3, {owner, counter, ms left, ...}, waiters, permits}  the live permits
-- `waiters` counts the live entries of the key's line (live-line.lua, which scripts.ts puts in
-- front of this script): a list (single node) or a sorted set (Redlock node) of owners.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Members of a sorted set of expiries still live, as {owner, counter, ms left, ...}.
local function liveMembers(expiriesKey, tokensKey)
  local members = redis.call('ZRANGEBYSCORE', expiriesKey, '(' .. now, '+inf', 'WITHSCORES')
  local out = {}
  for i = 1, #members, 2 do
    local token = redis.call('HGET', tokensKey, members[i])
    if token then
      out[#out + 1] = members[i]
      out[#out + 1] = token
      out[#out + 1] = tonumber(members[i + 1]) - now
    end
  end
  return out
end

local replies = {}
for i, kind in ipairs(ARGV) do
  local base = (i - 1) * 5
  local a, b, c, queueKey, waitersKey =
    KEYS[base + 1], KEYS[base + 2], KEYS[base + 3], KEYS[base + 4], KEYS[base + 5]
  local reply = {0}
  if kind == 'w' then
    local value = redis.call('GET', a)
    local pttl = redis.call('PTTL', a)
    if value and pttl > 0 then reply = {1, value, pttl, liveEntries(queueKey, waitersKey, now)} end
  elseif kind == 'r' then
    if redis.call('EXISTS', a) == 0 then
      local readers = liveMembers(b, c)
      if #readers > 0 then reply = {2, readers, liveEntries(queueKey, waitersKey, now)} end
    end
  elseif kind == 'p' then
    local holders = liveMembers(a, b)
    if #holders > 0 then
      local waiting = liveEntries(queueKey, waitersKey, now)
      reply = {3, holders, waiting, tonumber(redis.call('GET', c) or '0')}
    end
  end
  replies[i] = reply
end
return replies
