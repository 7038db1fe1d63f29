-- Read a lock's holders and last fencing token in one atomic step (lock-line.lua precedes this
-- script and describes the keys): its writer, or else its readers (expired ones are dropped).
-- Returns {writer "<owner>:<token>" or false, writer PTTL, last token or false, the earliest
-- reader's (lowest token) owner or false, its token or false, its ms left, the highest reader
-- token or false}.
local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local readersKey = KEYS[3]
local tokensKey = KEYS[4]

local reply = {redis.call('GET', lockKey), redis.call('PTTL', lockKey), redis.call('GET', fenceKey),
  false, false, 0, false}
if liveReaders(readersKey, tokensKey) == 0 then return reply end
-- Tokens stay below 2^53 (lock-line.lua's nextToken), exact as Lua numbers.
local tokens = redis.call('HGETALL', tokensKey)
local lowest, highest
for i = 1, #tokens, 2 do
  local t = tonumber(tokens[i + 1])
  if not lowest or t < lowest then
    lowest = t
    reply[4], reply[5] = tokens[i], tokens[i + 1]
  end
  if not highest or t > highest then
    highest = t
    reply[7] = tokens[i + 1]
  end
end
if reply[4] then
  reply[6] = math.max(tonumber(redis.call('ZSCORE', readersKey, reply[4]) or '0') - nowMs(), 0)
end
return reply
