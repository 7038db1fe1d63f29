-- Redlock, on one node: withdraw a contender of either mode. Deletes its grant (the writer's key,
-- or its read grant) whatever the token (unless keepGrant: a contender leaving the line only),
-- and takes the owner out of the key's line (unless keepPlace: a vote this owner lost while it
-- goes on waiting; its entry is then written with its ticket, marked as a reader when `reads`,
-- where this node granted it and so holds none, lest two contenders granted on different nodes
-- each find the other first there). When that may let others in (a grant deleted, or the head or
-- a writer's entry removed) and no writer holds the key, the front of the line is woken
-- (wakeFront, line.lua, which precedes this script; only readers while readers hold the key),
-- except this owner: it attempts again after its own wait.
-- Deleting this owner's live writer grant deletes its lock-delay too (clearDelay, line.lua), as a
-- release does; a grant already gone here leaves any delay alone.
-- Returns 1 deleted this owner's grant, 0 nothing of this owner's held the key (or keepGrant).
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local waitersKey = KEYS[3]
local channel = KEYS[4]
local readersKey = KEYS[5]
local tokensKey = KEYS[6]
local owner = ARGV[1]
local keepGrant = ARGV[2] == '1'
local keepPlace = ARGV[3] == '1'
local ticket = ARGV[4]                 -- with keepPlace: the owner's ticket
local waiterTtlMs = tonumber(ARGV[5])  -- with keepPlace: entry lifetime from now, ms
local reads = ARGV[6] == '1'           -- with keepPlace: the owner waits to read
local delayKey = KEYS[7]               -- the writer's lock-delay (line.lua); nil: none kept

local deleted = 0
local current = redis.call('GET', lockKey)
if not keepGrant then
  if current then
    local sep = string.find(current, ':', 1, true)
    if string.sub(current, 1, sep - 1) == owner then
      redis.call('DEL', lockKey)
      clearDelay(delayKey, owner)
      current = false
      deleted = 1
    end
  end
  if redis.call('ZREM', readersKey, owner) == 1 then
    redis.call('HDEL', tokensKey, owner)
    deleted = 1
  end
end

local freed = deleted == 1
if keepPlace then
  joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs, reads)
else
  local wasHead = redis.call('ZRANGE', queueKey, 0, 0)[1] == owner
  local wasWriter = redis.call('HGET', waitersKey, owner .. ':read') ~= '1'
  if leaveLine(queueKey, waitersKey, owner) and (wasHead or wasWriter) then freed = true end
end
if not current and freed then
  wakeFront(queueKey, waitersKey, channel, owner, liveReaders(readersKey, tokensKey) > 0)
end
return deleted
