-- Withdraw a contender (single node, with a line of waiters): delete the key if this owner holds
-- it, whatever its token (unless keepGrant), and take the owner out of the line. When that frees
-- the key or removes the head of the line while the key is free, the key is handed to the (new)
-- head of the line (handOff, line-handoff.lua, which precedes this script). A grant handed to
-- this owner while it was giving up is deleted and handed on the same way.
-- Returns 1 deleted this owner's key, 0 nothing of this owner's held the key (or keepGrant).
local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local channel = KEYS[3]
local queueKey = KEYS[4]
local waitersKey = KEYS[5]
local owner = ARGV[1]
local keepGrant = ARGV[2] == '1' -- '1': leave the line only, never delete a grant
local capMs = tonumber(ARGV[3])          -- longest first TTL of a handed grant, ms
local fenceGraceMs = tonumber(ARGV[4])   -- the fence counter outlives a grant's TTL this long

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

local wasHead = redis.call('LINDEX', queueKey, 0) == owner
if redis.call('HDEL', waitersKey, owner, owner .. ':ttl') > 0 then
  redis.call('LREM', queueKey, 1, owner)
end

if not current and (deleted == 1 or wasHead) then
  handOff(lockKey, fenceKey, channel, queueKey, waitersKey, capMs, fenceGraceMs)
end
return deleted
