-- Redlock, on one node: a lock's writer, readers and last token in one atomic step (read only).
-- Returns {writer's "<owner>:<token>" or false, its PTTL, last token or false, readers}, where
-- readers is a flat list of "<owner>", "<token>", ms left for each live read grant.
local lockKey, fenceKey, readersKey, tokensKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local readers = {}
if redis.call('EXISTS', readersKey) == 1 then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local live = redis.call('ZRANGEBYSCORE', readersKey, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    local token = redis.call('HGET', tokensKey, live[i])
    if token then
      readers[#readers + 1] = live[i]
      readers[#readers + 1] = token
      readers[#readers + 1] = tonumber(live[i + 1]) - now
    end
  end
end
return {redis.call('GET', lockKey), redis.call('PTTL', lockKey), redis.call('GET', fenceKey), readers}
