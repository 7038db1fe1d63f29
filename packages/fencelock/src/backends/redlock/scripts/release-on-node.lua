-- Redlock, on one node: compare-and-delete by owner and token, then wake the head of the key's
-- line: its owner id is published on the key's release channel (expired entries at the head
-- are dropped first). Every node orders the line alike, so each names the same head.
-- Returns 1 released, 0 not held (key gone), -1 held by another owner or token (left untouched).
local lockKey = KEYS[1]
local channel = KEYS[2]                     -- release notifications for this key
local queueKey = KEYS[3]                    -- sorted set: waiting owner -> place
local waitersKey = KEYS[4]                  -- hash: waiting owner -> entry expiry (ms)
local expected = ARGV[1] .. ':' .. ARGV[2]  -- "<owner>:<token>"

local current = redis.call('GET', lockKey)
if not current then
  return 0
end
if current ~= expected then
  return -1
end
redis.call('DEL', lockKey)

-- Wake the first live entry of the line (this node's TIME, read only if there is a line).
local now
while true do
  local first = redis.call('ZRANGE', queueKey, 0, 0)[1]
  if not first then break end
  if not now then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  if tonumber(redis.call('HGET', waitersKey, first) or '0') > now then
    redis.call('PUBLISH', channel, first)
    break
  end
  redis.call('ZREM', queueKey, first)
  redis.call('HDEL', waitersKey, first)
end
return 1
