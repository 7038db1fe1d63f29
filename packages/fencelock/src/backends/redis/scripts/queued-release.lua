-- Compare-and-delete by owner and token (single node, with a line of waiters), then hand the key
-- to the first live entry of the line (handOff, line-handoff.lua, which precedes this script):
-- that waiter is granted in this script and told on the key's release channel, so it holds the
-- key one message after the release, with no attempt of its own (and nobody else wakes).
-- Returns 1 released, 0 not held (key gone), -1 held by another owner or token (left untouched).
local lockKey = KEYS[1]
local fenceKey = KEYS[2]                    -- the key's last token (see queued-acquire.lua)
local channel = KEYS[3]                     -- release notifications for this key
local queueKey = KEYS[4]                    -- list of waiting owners, head first
local waitersKey = KEYS[5]                  -- hash: entry expiry (ms) and ttlMs per owner
local expected = ARGV[1] .. ':' .. ARGV[2]  -- "<owner>:<token>"
local capMs = tonumber(ARGV[3])             -- longest first TTL of a handed grant, ms
local fenceGraceMs = tonumber(ARGV[4])      -- the fence counter outlives a grant's TTL this long

local current = redis.call('GET', lockKey)
if not current then
  return 0
end
if current ~= expected then
  return -1
end
redis.call('DEL', lockKey)
handOff(lockKey, fenceKey, channel, queueKey, waitersKey, capMs, fenceGraceMs)
return 1
