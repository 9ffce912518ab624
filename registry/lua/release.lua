-- release: delete the lock only if this holder still owns it, and tell
-- waiters (Spring RedisLockRegistry compatible channel and payload).
--
-- KEYS[1]  lock key (registryKey:key)
-- KEYS[2]  wait marker key ({registryKey:key}:wait); absent when it would
--          lie in another Cluster slot (a key with braces, without
--          WithHashTag)
-- ARGV[1]  token of the hold being released
-- ARGV[2]  channel: registryKey-channel:registryKey:key
--
-- Reply: 1 when the key was ours and is deleted (a message carrying KEYS[1]
--        was published on ARGV[2]); 2 the same, and a wait marker shows
--        that registries wait (the releasing registry's next acquisition
--        then starts with obtain.lua, which respects their turns); 0 when
--        the key is gone or held by another token, in which case nothing
--        is changed.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  if KEYS[2] and redis.pcall('GET', KEYS[2]) then
    return 2
  end
  return 1
end
return 0
