-- Fenced compare-and-set (the Redis fencing guard): write a resource only if no newer fencing
-- token has reached it AND its current value is the one the caller expects. The token rule is
-- checked first, so a stale writer always learns it is stale, whatever the value.
-- Tokens are canonical decimals (no leading zeros), compared exactly as strings: longer is larger,
-- equal length compares by characters. An equal token passes (the same holder writing again).
-- A newer token refused only because the value differs is still recorded (the token field, not
-- the value): it has reached the resource, so older tokens are fenced off from then on, as
-- PgFence.transaction records a token before the caller's own check.
-- The value field is present once a value was written; a hash may hold a token alone.
-- Returns {1, token} written; {0, current token} refused as stale;
-- {-1, current token, current value} refused because the value differs ({-1} when no value was
-- ever written); the current token is then the newest the resource has seen, this one included.
local resource = KEYS[1]      -- hash: token, value
local token = ARGV[1]
local expectPresent = ARGV[2] -- '1': expect the value ARGV[3]; '0': expect no write yet
local expected = ARGV[3]
local value = ARGV[4]

local current = redis.call('HMGET', resource, 'token', 'value')
local currentToken, currentValue = current[1], current[2]

-- 1. Token rule.
if currentToken and (#currentToken > #token or (#currentToken == #token and currentToken > token)) then
  return {0, currentToken}
end

-- 2. Value compare (HMGET answers false for a missing field).
local matches
if expectPresent == '1' then
  matches = currentValue ~= false and currentValue == expected
else
  matches = not currentValue
end
if not matches then
  -- The token passed the rule: it is at least the stored one. Record it if newer.
  if currentToken ~= token then redis.call('HSET', resource, 'token', token) end
  if currentValue then return {-1, token, currentValue} end
  return {-1}
end

redis.call('HSET', resource, 'token', token, 'value', value)
return {1, token}
