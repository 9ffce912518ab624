-- obtain: take the lock if it is free; if not, leave a wait marker so that
-- the holder's registry stops passing the lock among its own goroutines.
--
-- KEYS[1]  lock key (registryKey:key)
-- KEYS[2]  wait marker key ({registryKey:key}:wait)
-- KEYS[3]  fence counter key; present only when fencing is on
-- ARGV[1]  token, unique to this acquisition
-- ARGV[2]  time to live in milliseconds
-- ARGV[3]  time to live of the wait marker in milliseconds
-- ARGV[4]  id of the obtaining registry, the wait marker's value
--
-- Reply: {1, fence} when acquired; fence is the new value of the counter
--        (strictly increasing per key), or 0 without fencing.
--        The same when the key already holds ARGV[1]: a client that resent
--        this script after a lost reply (go-redis retries) gets the lock it
--        took, with the current value of the counter.
--        {0, pttl} when another holder has it; pttl is its remaining time to
--        live in ms, or -1 if the key has no expiry. The wait marker then
--        names this registry.
-- Error: WRONGTYPE when KEYS[1] holds something other than a string.
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
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = 0
  if KEYS[3] then
    fence = nextFence(KEYS[3])
  end
  return {1, fence}
end
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  return redis.error_reply('WRONGTYPE lock key holds a value that is not a string')
end
if value == ARGV[1] then
  local fence = 0
  if KEYS[3] then
    fence = tonumber(redis.call('GET', KEYS[3]) or '0')
  end
  return {1, fence}
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
return {0, redis.call('PTTL', KEYS[1])}
