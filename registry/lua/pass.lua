-- pass: the holder's registry has goroutines waiting for the lock. Keep the
-- lock for them (resetting its time to live) unless another registry waits,
-- as the wait marker shows (see obtain.lua: a live entry of another
-- registry, or a bare id); then release it (as release.lua does), leaving
-- the marker, the queue of the registries that wait.
--
-- KEYS[1]  lock key (registryKey:key)
-- KEYS[2]  wait marker key ({registryKey:key}:wait)
-- KEYS[3]  fence counter key; present only when fencing is on
-- ARGV[1]  token of the hold being passed
-- ARGV[2]  time to live in milliseconds
-- ARGV[3]  channel: registryKey-channel:registryKey:key
-- ARGV[4]  id of the holder's registry
--
-- Reply: {1, fence} when kept: the time to live is reset; fence is the new
--        value of the counter (0 without fencing), for the next holder.
--        {2, 0} when released because another registry waits: the key is
--        deleted and a message carrying KEYS[1] is published on ARGV[3].
--        {0, 0} when the key is gone or held by another token, in which
--        case nothing is changed.
-- nextFence increments the fence counter key. A missing counter (a new
-- key, or one Redis lost: a restart without persistence, a failover to a
-- replica that lacked it, FLUSHALL) is first seeded with the server's clock
-- in microseconds, so that tokens keep increasing across such a loss while
-- the clock does not go back and the key sees fewer than a million
-- acquisitions a second on average.
local function nextFence(key)
  if not redis.call('GET', key) then
    local t = redis.call('TIME')
    redis.call('SET', key, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  return redis.call('INCR', key)
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
-- othersWait reports whether the marker holds a live entry of another
-- registry (see obtain.lua), or, if the script may not call TIME, whether
-- it names another registry.
local function othersWait(raw)
  local t = redis.pcall('TIME')
  if type(t) ~= 'table' or t.err then
    return raw ~= ARGV[4]
  end
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for e in string.gmatch(raw, '%S+') do
    local id, expiry = string.match(e, '^(.+)[=~!](%d+)/%d+$')
    if not id then
      id, expiry = e, now + 1
    end
    if id ~= ARGV[4] and tonumber(expiry) > now then
      return true
    end
  end
  return false
end
local raw = redis.pcall('GET', KEYS[2])
if type(raw) == 'string' and othersWait(raw) then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], KEYS[1])
  return {2, 0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local fence = 0
if KEYS[3] then
  fence = nextFence(KEYS[3])
end
return {1, fence}
