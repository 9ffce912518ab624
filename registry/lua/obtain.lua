-- obtain: take the lock if it is free.
--
-- KEYS[1]  lock key (registryKey:key)
-- KEYS[2]  fence counter key; present only when fencing is on
-- ARGV[1]  token, unique to this acquisition
-- ARGV[2]  time to live in milliseconds
--
-- Reply: {1, fence} when acquired; fence is the new value of the counter
--        (strictly increasing per key), or 0 without fencing.
--        {0, pttl} when another holder has it; pttl is its remaining time to
--        live in ms, or -1 if the key has no expiry.
-- Error: WRONGTYPE when KEYS[1] holds something other than a string.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = 0
  if KEYS[2] then
    fence = redis.call('INCR', KEYS[2])
  end
  return {1, fence}
end
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key holds a value that is not a string')
end
return {0, redis.call('PTTL', KEYS[1])}
