-- Shared fragment: count the live entries of a key's line, read only. The line is a list (single
-- node, lock-line.lua) or a sorted set (Redlock node, redlock/scripts/line.lua) of owners, each
-- live while its expiry in the `waiters` hash (ms, Redis TIME) is ahead of `nowMs`; an expired
-- entry is skipped, not removed. `except`: an owner left out of the count (nil: none).
local function liveEntries(queueKey, waitersKey, nowMs, except)
  local kind = redis.call('TYPE', queueKey)['ok']
  local owners
  if kind == 'list' then
    owners = redis.call('LRANGE', queueKey, 0, -1)
  elseif kind == 'zset' then
    owners = redis.call('ZRANGE', queueKey, 0, -1)
  else
    return 0
  end
  local live = 0
  for _, owner in ipairs(owners) do
    if owner ~= except and tonumber(redis.call('HGET', waitersKey, owner) or '0') > nowMs then
      live = live + 1
    end
  end
  return live
end
