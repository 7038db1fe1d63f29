-- Withdraw a candidate: delete its grant whatever the term (also one handed to it while it gave
-- up), unless keepGrant, and take it out of the line. When nobody leads afterwards and this
-- deleted a grant or removed the head of the line, the election is handed over (handOver,
-- election-line.lua, which describes the keys).
-- Deleting this owner's live grant deletes its lock-delay too, as a resignation does.
-- Returns 1 deleted a grant of this owner, 0 nothing deleted.
local e = electionKeysAt(1)          -- leader, term, queue, waiters, channel, delay
local owner = ARGV[1]
local keepGrant = ARGV[2] == '1'     -- '1': leave the line only, never delete a grant
local capMs = tonumber(ARGV[3])      -- longest first TTL of a handed grant, ms

local deleted = 0
local current = redis.call('GET', e.leader)
if current and not keepGrant then
  local _, holder = grantHead(current)
  if holder == owner then
    redis.call('DEL', e.leader)
    if e.delay then redis.call('DEL', e.delay) end
    current = false
    deleted = 1
  end
end
local wasHead = redis.call('LINDEX', e.queue, 0) == owner
dropCandidate(e, owner)
if not current and (deleted == 1 or wasHead) then handOver(e, capMs) end
return deleted
