-- Hand a free key to the first live entry of its line: the fragment queued-release.lua and
-- queued-abandon.lua begin with (scripts.ts puts it in front of them). Entries whose time ran out
-- are dropped on the way. The head's grant is made as queued-acquire.lua makes one (the token is
-- the larger of the last token + 1 and Redis TIME in µs, the fence counter kept the head's TTL +
-- fenceGraceMs), the key is set to "<head>:<token>" for a first TTL of min(head's ttlMs, capMs),
-- and "<head>:<token>:<first TTL>" is published on the key's channel: the waiter takes the grant
-- on receipt, with no attempt of its own, then renews it to its full TTL at once. A waiter that
-- never takes it (crashed, message lost) costs the first TTL at most; a waiter whose message was
-- lost gets the grant from its next attempt ("the same owner asks again" in queued-acquire.lua).
-- An entry with no TTL recorded (written by an older queued-acquire.lua) is only woken by its
-- owner id, as before: its own attempt takes the key.
-- The hash of entries holds, per waiting owner, "<owner>" -> entry expiry (ms, Redis TIME) and
-- "<owner>:ttl" -> the ttlMs it asked for (owners are hex, so the names never clash).
local function handOff(lockKey, fenceKey, channel, queueKey, waitersKey, capMs, fenceGraceMs)
  local time
  while true do
    local first = redis.call('LINDEX', queueKey, 0)
    if not first then return end
    if not time then time = redis.call('TIME') end
    local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local ttlField = first .. ':ttl'
    local expiresAt = tonumber(redis.call('HGET', waitersKey, first) or '0')
    local ttlMs = tonumber(redis.call('HGET', waitersKey, ttlField) or '0')
    if expiresAt > nowMs and ttlMs <= 0 then
      redis.call('PUBLISH', channel, first)
      return
    end
    redis.call('LPOP', queueKey)
    redis.call('HDEL', waitersKey, first, ttlField)
    if expiresAt > nowMs then
      -- '%d' writes every digit (see queued-acquire.lua); both numbers stay below 2^53.
      local last = tonumber(redis.call('GET', fenceKey) or '0')
      local clockUs = tonumber(time[1]) * 1000000 + tonumber(time[2])
      local token = string.format('%d', math.max(last + 1, clockUs))
      local firstTtlMs = string.format('%d', math.min(ttlMs, capMs))
      redis.call('SET', fenceKey, token, 'PX', string.format('%d', ttlMs + fenceGraceMs))
      redis.call('SET', lockKey, first .. ':' .. token, 'PX', firstTtlMs)
      redis.call('PUBLISH', channel, first .. ':' .. token .. ':' .. firstTtlMs)
      return
    end
  end
end
