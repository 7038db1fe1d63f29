-- A candidate's attempt at an election (lock-line.lua and election-line.lua, which describes the
-- keys, precede this script): granted as a lock's writer is (queued-acquire.lua) when nobody
-- leads and the line is empty or this candidate heads it; the grant stores its value and a new
-- term (nextTerm: the election's counter never expires), and "*" is published on the election's
-- channel. A candidate that already leads (a lost reply, or a hand-over whose message it has not
-- seen) is answered with its term, its TTL refreshed and its value kept. Otherwise a waiting
-- candidate joins the tail of the line with its value (or keeps its place).
-- A grant made with lockDelayMs D records it (election-line.lua's delay key); while a leadership
-- that ended without a resignation is in its delay, nobody is granted (the line keeps its order).
-- Returns {1, term} when granted; {0, ms} when not, where ms bounds how long the election can
-- stay unavailable to this candidate with nothing changing (the leader's PTTL, the lock-delay
-- left, or the remaining entry time of the head of the line).
local e = electionKeysAt(1)           -- leader, term, queue, waiters, channel, delay
local owner = ARGV[1]                 -- candidate id (hex, no ':')
local ttlMs = ARGV[2]                 -- lease length in whole milliseconds
local waiterTtlMs = tonumber(ARGV[3]) -- entry lifetime; 0: a single attempt, never queued
local value = ARGV[4]                 -- the candidate's value
local delayMs = ARGV[5]               -- the grant's lock-delay, ms; absent or '0': none

local current = redis.call('GET', e.leader)
if current then
  local _, holder, term = grantHead(current)
  if holder == owner then
    redis.call('PEXPIRE', e.leader, ttlMs)
    holdDelay(e.delay, ttlMs, delayMs)
    return {1, term}
  end
  joinLine(e, owner, ttlMs, value, waiterTtlMs, delayMs)
  return {0, redis.call('PTTL', e.leader)}
end
local delayed = delayLeft(e.delay)
if delayed > 0 then
  joinLine(e, owner, ttlMs, value, waiterTtlMs, delayMs)
  return {0, delayed}
end
local first, left = headCandidate(e)
if first and first ~= owner then
  joinLine(e, owner, ttlMs, value, waiterTtlMs, delayMs)
  return {0, left}
end
local term = grantLeader(e, owner, ttlMs, value, delayMs)
redis.call('PUBLISH', e.channel, '*')
return {1, term}
