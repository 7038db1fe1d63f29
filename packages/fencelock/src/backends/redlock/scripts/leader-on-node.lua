-- Redlock, on one node: an election's leader in one atomic read (read only): {owner, term, value,
-- PTTL ms}, or {} when nobody leads here.
local fields = redis.call('HMGET', KEYS[1], 'owner', 'term', 'value')
if not fields[1] then return {} end
return {fields[1], fields[2], fields[3] or '', redis.call('PTTL', KEYS[1])}
