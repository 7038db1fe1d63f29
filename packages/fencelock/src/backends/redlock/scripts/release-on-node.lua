-- Redlock, on one node: compare-and-delete by owner and token, then wake the head of the key's
-- line (wakeHead, line.lua, which precedes this script): its owner id is published on the key's
-- channel, and that waiter attempts at once. The owner leaves the line here first: a head keeps
-- its entry while it holds the key (grant-on-node.lua), and an attempt this node did not grant
-- (the vote was won on the others) left one too.
-- Returns 1 released, 0 not held (key gone), -1 held by another owner or token (left untouched).
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local waitersKey = KEYS[3]
local channel = KEYS[4]                     -- release notifications for this key
local expected = ARGV[1] .. ':' .. ARGV[2]  -- "<owner>:<token>"

leaveLine(queueKey, waitersKey, ARGV[1])
local current = redis.call('GET', lockKey)
if not current then
  return 0
end
if current ~= expected then
  return -1
end
redis.call('DEL', lockKey)
wakeHead(queueKey, waitersKey, channel)
return 1
