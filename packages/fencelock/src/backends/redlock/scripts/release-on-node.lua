-- Redlock, on one node: compare-and-delete a grant of either mode by owner and token, then wake
-- the front of the key's line (wakeFront, line.lua, which precedes this script): a writer's
-- release wakes the consecutive readers at the head (or the head writer), each by its owner id on
-- the key's channel; the last reader's release wakes the head writer. The owner leaves the line
-- here first: a head writer keeps its entry while it holds the key (grant-on-node.lua), and an
-- attempt this node did not grant (the vote was won on the others) left one too.
-- A writer's release that deletes its live grant deletes its lock-delay too (clearDelay,
-- line.lua: no delay follows a release); one that finds the grant gone leaves any delay alone.
-- Returns 1 released, 0 not held (no writer, no live reader), -1 this owner and token hold
-- nothing while someone holds the key (left untouched).
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local waitersKey = KEYS[3]
local channel = KEYS[4]                     -- release notifications for this key
local readersKey = KEYS[5]                  -- sorted set: reading owner -> grant expiry
local tokensKey = KEYS[6]                   -- hash: reading owner -> its token
local delayKey = KEYS[7]                    -- the writer's lock-delay (line.lua); nil: none kept
local owner, token = ARGV[1], ARGV[2]
local expected = owner .. ':' .. token      -- "<owner>:<token>"

leaveLine(queueKey, waitersKey, owner)
local current = redis.call('GET', lockKey)
if current == expected then
  redis.call('DEL', lockKey)
  clearDelay(delayKey, owner)
  -- A downgrade's reader may still hold the key: then only readers at the head may go. Asked
  -- only when a writer heads the line, so a plain write lock's release pays nothing for readers.
  wakeFront(queueKey, waitersKey, channel, nil, function()
    return liveReaders(readersKey, tokensKey) > 0
  end)
  return 1
end
local readers = liveReaders(readersKey, tokensKey)
if readers > 0 and redis.call('HGET', tokensKey, owner) == token then
  redis.call('ZREM', readersKey, owner)
  redis.call('HDEL', tokensKey, owner)
  if not current and readers == 1 then wakeHead(queueKey, waitersKey, channel) end
  return 1
end
if current or readers > 0 then return -1 end
return 0
