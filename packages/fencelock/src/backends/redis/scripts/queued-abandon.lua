-- Withdraw a contender (single node, with a line of waiters and readers): delete its grant
-- whatever its token (the key if this owner holds it as the writer, its entry among the readers),
-- unless keepGrant, and take the owner out of the line. When no writer holds the key afterwards
-- and this deleted a grant, removed the head of the line or removed a writer's entry (readers
-- behind it may go now), the key is handed on (handOff, line-handoff.lua, which precedes this
-- script after lock-line.lua). A grant handed to this owner while it was giving up is deleted
-- and handed on the same way.
-- Deleting this owner's live writer grant deletes its lock-delay too, as a release does.
-- Returns 1 deleted a grant of this owner, 0 nothing of this owner's held the key (or keepGrant).
local keys = {
  lock = KEYS[1],
  fence = KEYS[2],
  channel = KEYS[3],
  queue = KEYS[4],
  waiters = KEYS[5],
  readers = KEYS[6],
  readerTokens = KEYS[7],
  delay = KEYS[8],          -- the writer's lock-delay (absent from older callers: none)
}
local owner = ARGV[1]
local keepGrant = ARGV[2] == '1'        -- '1': leave the line only, never delete a grant
local capMs = tonumber(ARGV[3])         -- longest first TTL of a handed grant, ms
local fenceGraceMs = tonumber(ARGV[4])  -- the fence counter outlives a grant's TTL this long

local deleted = 0
local current = redis.call('GET', keys.lock)
if not keepGrant then
  if current then
    local sep = string.find(current, ':', 1, true)
    if string.sub(current, 1, sep - 1) == owner then
      redis.call('DEL', keys.lock)
      if keys.delay then redis.call('DEL', keys.delay) end
      current = false
      deleted = 1
    end
  end
  if redis.call('ZREM', keys.readers, owner) == 1 then
    redis.call('HDEL', keys.readerTokens, owner)
    deleted = 1
  end
end

local wasHead = redis.call('LINDEX', keys.queue, 0) == owner
local wasWriter = redis.call('HEXISTS', keys.waiters, owner) == 1
  and redis.call('HEXISTS', keys.waiters, owner .. ':read') == 0
leaveLine(keys.queue, keys.waiters, owner)

if not current and (deleted == 1 or wasHead or wasWriter) then
  handOff(keys, capMs, fenceGraceMs)
end
return deleted
