-- Redlock, on one node: after an election was granted on a quorum, make this node agree on the
-- combined term (line.lua and election-line.lua precede this script): where this owner leads
-- here, its term becomes `term` (TTL kept) and the term counter is raised to it (it never
-- expires), so that the next grant on any quorum, which shares a node with this one, counts past
-- it. Returns 1 settled, 0 this owner does not lead here.
local leaderKey = KEYS[1]
local termKey = KEYS[2]
local changedChannel = KEYS[3]
local owner = ARGV[1]
local term = ARGV[2] -- decimal, the highest term among the granting nodes

local holder, held = leaderOf(leaderKey)
if holder ~= owner then return 0 end
if held ~= term then
  redis.call('HSET', leaderKey, 'term', term)
  changed(changedChannel, 'settled')
end
raiseTerm(termKey, term)
return 1
