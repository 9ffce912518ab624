-- renew: reset the time to live of the lock only if this holder still owns it.
--
-- KEYS[1]  lock key (registryKey:key)
-- ARGV[1]  token of the hold being renewed
-- ARGV[2]  time to live in milliseconds
--
-- Reply: 1 when renewed; 0 when the key is gone or held by another token,
--        in which case nothing is changed.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
