-- Redlock, on one node: withdraw a contender. What goes depends on `what`:
--   'all'   its key (if this owner holds it, whatever its token) and its entry in the line (an
--           acquire given up on, or an attempt whose reply came too late or was lost);
--   'grant' its key, back to its place in line (a vote it lost: it attempts again; the grant
--           took its entry out of this node's line);
--   'line'  its entry only, never a grant (a waiter that gave up, or a grant won elsewhere).
-- When that frees the key or removes the head of the line, the (new) head is woken by
-- publishing its owner id on the key's release channel.
-- Returns 1 deleted this owner's key, 0 nothing of this owner's held the key (or 'line').
local lockKey = KEYS[1]
local channel = KEYS[2]
local queueKey = KEYS[3]
local waitersKey = KEYS[4]
local owner = ARGV[1]
local what = ARGV[2]
local place = ARGV[3]                  -- with 'grant': the contender's place in line
local waiterTtlMs = tonumber(ARGV[4])  -- with 'grant': its entry's lifetime, ms

local deleted = 0
local current = redis.call('GET', lockKey)
if current and what ~= 'line' then
  local sep = string.find(current, ':', 1, true)
  if string.sub(current, 1, sep - 1) == owner then
    redis.call('DEL', lockKey)
    current = false
    deleted = 1
  end
end

-- This node's clock in ms, read once, only when needed.
local nowMs
local function now()
  if not nowMs then
    local time = redis.call('TIME')
    nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return nowMs
end

if what == 'grant' and deleted == 1 then
  redis.call('HSET', waitersKey, owner, now() + waiterTtlMs)
  redis.call('ZADD', queueKey, place, owner)
  if redis.call('PTTL', queueKey) < waiterTtlMs then redis.call('PEXPIRE', queueKey, waiterTtlMs) end
  if redis.call('PTTL', waitersKey) < waiterTtlMs then redis.call('PEXPIRE', waitersKey, waiterTtlMs) end
end

local wasHead = false
if what ~= 'grant' and redis.call('HDEL', waitersKey, owner) == 1 then
  wasHead = redis.call('ZRANGE', queueKey, 0, 0)[1] == owner
  redis.call('ZREM', queueKey, owner)
end

if not current and (deleted == 1 or wasHead) then
  while true do
    local first = redis.call('ZRANGE', queueKey, 0, 0)[1]
    if not first then break end
    if tonumber(redis.call('HGET', waitersKey, first) or '0') > now() then
      redis.call('PUBLISH', channel, first)
      break
    end
    redis.call('ZREM', queueKey, first)
    redis.call('HDEL', waitersKey, first)
  end
end
return deleted
