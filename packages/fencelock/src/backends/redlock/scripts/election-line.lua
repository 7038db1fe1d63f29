-- Redlock, on one node: what the election scripts share (after line.lua, which precedes this
-- fragment). An election's leader is one hash with the grant's TTL (PX): "owner", "term" (the
-- grant's fencing token) and "value" (what the leader campaigned with or last proclaimed), so
-- that the value lives and dies with the grant. Its term counter never expires.

-- The holder of the election on this node: owner and term, or nil when nobody holds it.
local function leaderOf(leaderKey)
  local fields = redis.call('HMGET', leaderKey, 'owner', 'term')
  if not fields[1] then return nil, nil end
  return fields[1], fields[2]
end

-- Tell the election's watchers that its leader or value may have changed here.
local function changed(changedChannel, what)
  redis.call('PUBLISH', changedChannel, what)
end

-- Raise the term counter to at least `term` (decimal); it never expires.
local function raiseTerm(termKey, term)
  if tonumber(redis.call('GET', termKey) or '0') < tonumber(term) then
    redis.call('SET', termKey, term)
  end
end
