-- Redlock, on one node: compare-and-delete an election's leader by owner and term, with its value
-- (line.lua and election-line.lua precede this script), then wake the head of the line by its
-- owner id on the release channel and tell the watchers. The owner leaves the line here first (a
-- head keeps its entry while it leads, and an attempt this node did not grant left one too).
-- Deleting the live leadership deletes its lock-delay too (clearDelay, line.lua); a resignation
-- that finds it gone leaves any delay alone.
-- Returns 1 released, 0 nobody leads here, -1 another owner or term leads (left untouched).
local leaderKey = KEYS[1]
local queueKey = KEYS[2]
local waitersKey = KEYS[3]
local channel = KEYS[4]        -- release notifications: the head's owner id
local changedChannel = KEYS[5] -- watchers' channel
local delayKey = KEYS[6]       -- the leadership's lock-delay (line.lua); nil: none kept
local owner, term = ARGV[1], ARGV[2]

leaveLine(queueKey, waitersKey, owner)
local holder, held = leaderOf(leaderKey)
if not holder then return 0 end
if holder ~= owner or held ~= term then return -1 end
redis.call('DEL', leaderKey)
clearDelay(delayKey, owner)
wakeHead(queueKey, waitersKey, channel)
changed(changedChannel, 'resigned')
return 1
