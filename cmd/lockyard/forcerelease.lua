-- force release (lockyard release --force): delete a lock key whatever
-- its value, and tell waiters, as a release does.
--
-- KEYS[1]  lock key (registryKey:key)
-- ARGV[1]  channel: registryKey-channel:registryKey:key
--
-- Reply: {value, pttl} of the key removed, or {false, -2} if there was none.
local v = redis.call('GET', KEYS[1])
if not v then
  return {false, -2}
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], KEYS[1])
return {v, pttl}
