-- Redlock, on one node: withdraw a candidate (line.lua and election-line.lua precede this
-- script). Deletes its leadership here with its value, whatever the term (unless keepGrant: a
-- candidate leaving the line only), and takes it out of the line (unless keepPlace: a vote it
-- lost while it goes on waiting; its entry is then written with its ticket, also where this node
-- granted it, so that every node orders the candidates of a split vote alike). When that frees the
-- election (its leadership deleted, or the head's entry removed), the head of the line is woken,
-- except this owner. The watchers are told of a deleted leadership.
-- Deleting its live leadership deletes its lock-delay too (clearDelay, line.lua); a leadership
-- already gone here leaves any delay alone.
-- Returns 1 deleted this owner's leadership, 0 nothing of it led here (or keepGrant).
local leaderKey = KEYS[1]
local queueKey = KEYS[2]
local waitersKey = KEYS[3]
local channel = KEYS[4]
local changedChannel = KEYS[5]
local delayKey = KEYS[6]              -- the leadership's lock-delay (line.lua); nil: none kept
local owner = ARGV[1]
local keepGrant = ARGV[2] == '1'
local keepPlace = ARGV[3] == '1'
local ticket = ARGV[4]                -- with keepPlace: the owner's ticket
local waiterTtlMs = tonumber(ARGV[5]) -- with keepPlace: entry lifetime from now, ms

local deleted = 0
local holder = leaderOf(leaderKey)
if not keepGrant and holder == owner then
  redis.call('DEL', leaderKey)
  clearDelay(delayKey, owner)
  changed(changedChannel, 'withdrawn')
  holder = nil
  deleted = 1
end

local freed = deleted == 1
if keepPlace then
  joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs, false)
else
  local wasHead = redis.call('ZRANGE', queueKey, 0, 0)[1] == owner
  if leaveLine(queueKey, waitersKey, owner) and wasHead then freed = true end
end
if not holder and freed then wakeHead(queueKey, waitersKey, channel, owner) end
return deleted
