-- Redlock, on one node: an election's leader in one atomic read (read only): {owner, term, value,
-- PTTL ms, candidates}, or {} when nobody leads here. `candidates` counts the leader and the live
-- entries of this node's line other than the leader's (the head keeps its entry while it leads,
-- campaign-on-node.lua; an entry lives while its expiry in `waiters` is ahead, line.lua, and an
-- expired one is skipped here and dropped by the next script that walks the line).
--   KEYS  leader, queue, waiters
local fields = redis.call('HMGET', KEYS[1], 'owner', 'term', 'value')
if not fields[1] then return {} end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local candidates = 1 + liveEntries(KEYS[2], KEYS[3], now, fields[1])
return {fields[1], fields[2], fields[3] or '', redis.call('PTTL', KEYS[1]), candidates}
