-- release: delete the lock only if this holder still owns it, and tell
-- waiters (Spring RedisLockRegistry compatible channel and payload).
--
-- KEYS[1]  lock key (registryKey:key)
-- ARGV[1]  token of the hold being released
-- ARGV[2]  channel: registryKey-channel:registryKey:key
--
-- Reply: 1 when the key was ours and is deleted (a message carrying KEYS[1]
--        was published on ARGV[2]); 0 when the key is gone or held by
--        another token, in which case nothing is changed.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
return 0
