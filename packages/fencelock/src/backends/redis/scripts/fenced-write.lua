-- Fencing guard (Kleppmann): write a resource only if no newer fencing token has written it.
-- Tokens are canonical decimals (no leading zeros), compared exactly as strings: longer is larger,
-- equal length compares by characters. An equal token is accepted (the same holder writing again).
-- Returns {1, token} written, {0, current token} refused.
local resource = KEYS[1]   -- hash: token, value
local token = ARGV[1]
local value = ARGV[2]

local current = redis.call('HGET', resource, 'token')
if current and (#current > #token or (#current == #token and current > token)) then
  return {0, current}
end
redis.call('HSET', resource, 'token', token, 'value', value)
return {1, token}
