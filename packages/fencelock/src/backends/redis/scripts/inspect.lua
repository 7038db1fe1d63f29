-- Read a key's holder, remaining TTL and last fencing token in one atomic step.
-- Returns {value or false, PTTL, last token or false}.
local lockKey = KEYS[1]
local fenceKey = KEYS[2]

return {redis.call('GET', lockKey), redis.call('PTTL', lockKey), redis.call('GET', fenceKey)}
