-- Redlock, on one node: the key's line of waiters, the fragment grant-on-node.lua,
-- release-on-node.lua and withdraw-on-node.lua begin with (scripts.ts puts it in front of them).
-- The line is a sorted set of owners scored by their ticket: the time each contender started
-- waiting, in µs on its own clock, the same on every node, so that every node orders the same
-- contenders the same way (ties by owner id) and the head of one node's line is the head of
-- every line it stands in. A hash holds each entry's expiry (ms on this node's clock, TIME): an
-- entry lives waiterTtlMs past its owner's latest attempt, so a waiter that vanished blocks the
-- line for that long at most.

-- This node's clock in ms.
local function nowMs()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The head of the line after dropping expired entries there: owner and ms its entry has left,
-- or nil when the line is empty.
local function lineHead(queueKey, waitersKey)
  local now
  while true do
    local first = redis.call('ZRANGE', queueKey, 0, 0)[1]
    if not first then return nil, 0 end
    now = now or nowMs()
    local expiresAt = tonumber(redis.call('HGET', waitersKey, first) or '0')
    if expiresAt > now then return first, expiresAt - now end
    redis.call('ZREM', queueKey, first)
    redis.call('HDEL', waitersKey, first)
  end
end

-- Put `owner` in the line by its ticket, or keep its place and refresh its entry, to live
-- waiterTtlMs from now; both keys outlive the newest entry.
local function joinLine(queueKey, waitersKey, owner, ticket, waiterTtlMs)
  redis.call('ZADD', queueKey, ticket, owner)
  redis.call('HSET', waitersKey, owner, nowMs() + waiterTtlMs)
  if redis.call('PTTL', queueKey) < waiterTtlMs then redis.call('PEXPIRE', queueKey, waiterTtlMs) end
  if redis.call('PTTL', waitersKey) < waiterTtlMs then redis.call('PEXPIRE', waitersKey, waiterTtlMs) end
end

-- Take `owner` out of the line; true if it stood there.
local function leaveLine(queueKey, waitersKey, owner)
  if redis.call('ZREM', queueKey, owner) == 0 then return false end
  redis.call('HDEL', waitersKey, owner)
  return true
end

-- Tell the head of the line, if any and other than `except`, that the key is free: its owner id
-- on the key's channel.
local function wakeHead(queueKey, waitersKey, channel, except)
  local first = lineHead(queueKey, waitersKey)
  if first and first ~= except then redis.call('PUBLISH', channel, first) end
end
