-- Redlock, on one node: withdraw a contender. Deletes the key if this owner holds it, whatever
-- its token (unless keepGrant: a contender leaving the line only), and takes the owner out of
-- the key's line (unless keepPlace: a vote this owner lost while it goes on waiting; its entry is
-- then written with its ticket, where this node granted it on an empty line and so holds none,
-- lest two contenders granted on different nodes each find the other first there). When that
-- frees the key, or removes the head of the line while the key is free, the (new) head is woken
-- (wakeHead, line.lua, which precedes this script), unless it is this owner keeping its place:
-- it attempts again after its own wait.
-- Returns 1 deleted this owner's key, 0 nothing of this owner's held the key (or keepGrant).
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local waitersKey = KEYS[3]
local channel = KEYS[4]
local owner = ARGV[1]
local keepGrant = ARGV[2] == '1'
local keepPlace = ARGV[3] == '1'
local ticket = ARGV[4]                 -- with keepPlace: the owner's ticket
local waiterTtlMs = tonumber(ARGV[5])  -- with keepPlace: entry lifetime from now, ms

local deleted = 0
local current = redis.call('GET', lockKey)
if current and not keepGrant then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    redis.call('DEL', lockKey)
    current = false
    deleted = 1
  end
end

local wasHead = false
if keepPlace then
  joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs)
else
  wasHead = redis.call('ZRANGE', queueKey, 0, 0)[1] == owner
  leaveLine(queueKey, waitersKey, owner)
end
if not current and (deleted == 1 or wasHead) then
  wakeHead(queueKey, waitersKey, channel, owner)
end
return deleted
