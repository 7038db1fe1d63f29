-- Redlock, on one node: grant an election to a candidate and issue this node's term, atomically,
-- in the order of the election's line (lineHead, line.lua; leaderOf, election-line.lua). As
-- grant-on-node.lua does for a lock: a free election goes to the head of the line, or to anyone
-- when the line is empty; a waiting candidate (ticket > 0) that is not the head joins the line or
-- keeps its place; a single attempt (ticket 0) never joins it; the head keeps its entry while it
-- leads here (its release takes it out). The leader's hash holds owner, term and the candidate's
-- value, with the grant's TTL. The same owner asking again (a lost reply) has its grant refreshed
-- and its term answered; its value is left as it is (a proclaim may have replaced it).
-- The term is the larger of the node's last term + 1 and its clock (whole ms, in µs), and the
-- counter never expires: above every term this node issued before whether the node lost its
-- counter (restarted empty, or from an older snapshot) or its clock stepped back, as long as not
-- both at once. Nodes that read the same millisecond on a fresh counter agree; others take the
-- settle round (settle-term-on-node.lua).
-- Lock-delay (line.lua: recordDelay, delayLeft), as grant-on-node.lua keeps it: with `delayKey`,
-- a free election whose last leadership ended without a resignation less than its D ago is
-- granted to nobody, the head of the line included; a grant with `lockDelayMs` > 0 records its
-- delay beside it, and the leader asking again moves it with the grant.
-- Returns {1, term} when granted; {0, ms} when not: the leader's PTTL, the delay left, or the
-- remaining entry time of the head of the line when the election is free but another candidate
-- is first.
local leaderKey = KEYS[1]  -- hash: owner, term, value; PX = the grant's TTL
local termKey = KEYS[2]    -- the election's last term on this node; no expiry
local queueKey = KEYS[3]   -- sorted set: waiting candidates by ticket
local waitersKey = KEYS[4] -- hash: candidate -> entry expiry (ms, TIME)
local changedChannel = KEYS[5] -- watchers' channel
local owner = ARGV[1]      -- candidate id (hex)
local ttlMs = ARGV[2]      -- grant length in whole milliseconds
local ticket = ARGV[3]     -- µs the candidate started waiting, on its clock; '0': single attempt
local waiterTtlMs = tonumber(ARGV[4]) -- entry lifetime past this attempt, ms
local value = ARGV[5]      -- the candidate's value
local delayKey = KEYS[6]   -- "<owner>:<D>" with PX = grant's TTL + D (line.lua); nil: no delay
local lockDelayMs = ARGV[6] or '0' -- this grant's lock-delay, ms; '0': none

local function enqueue()
  if ticket ~= '0' then joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs, false) end
end

local holder, held = leaderOf(leaderKey)
if holder then
  if holder == owner then
    redis.call('PEXPIRE', leaderKey, ttlMs)
    moveDelay(delayKey, owner, ttlMs, lockDelayMs)
    return {1, held}
  end
  enqueue()
  return {0, redis.call('PTTL', leaderKey)}
end

-- The last leadership ended without a resignation less than its delay ago: nobody goes yet.
local delayed = delayLeft(delayKey)
if delayed > 0 then
  enqueue()
  return {0, delayed}
end

-- Free: the head of the line goes first (a candidate this node lacked takes its place by ticket).
local first, left = lineHead(queueKey, waitersKey)
if first and first ~= owner then
  if ticket == '0' then return {0, left} end
  enqueue()
  first, left = lineHead(queueKey, waitersKey)
  if first ~= owner then return {0, left} end
end

-- The term: max(last + 1, clock in whole ms as µs). Below 2^53 (µs until the year 2255).
local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000000 + math.floor(tonumber(time[2]) / 1000) * 1000
local term = string.format('%d', math.max(tonumber(redis.call('GET', termKey) or '0') + 1, clock))
redis.call('SET', termKey, term)
redis.call('HSET', leaderKey, 'owner', owner, 'term', term, 'value', value)
redis.call('PEXPIRE', leaderKey, ttlMs)
recordDelay(delayKey, owner, ttlMs, lockDelayMs)
changed(changedChannel, 'granted')
return {1, term}
