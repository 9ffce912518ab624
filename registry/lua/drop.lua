-- drop: release.lua's uncontended path alone, for a holder that expects
-- no waiter (its acquisition found the key free, and its last release
-- found nobody queued): delete the lock only if this holder still owns it
-- and nobody is queued for it, and tell waiters (Spring RedisLockRegistry
-- compatible channel and payload). Two keys where release.lua takes five,
-- no rule of the queue and no prelude (Lua builds a closure of each of its
-- functions at every run): on Redis before 8.4, which has no native
-- compare-and-delete, this is the uncontended cycle's release, about
-- 1.6 µs of the server's time less than release.lua on Redis 7.0 (cd bench
-- && go run ./cycle).
--
-- KEYS[1]  lock key
-- KEYS[2]  its wait queue (wire.Layout.QueueKey)
-- ARGV[1]  token of the hold being released
-- ARGV[2]  release channel (registryKey-channel:lockKey)
--
-- Reply: 1 when the key was ours and is deleted (a message carrying
--        KEYS[1] was published on ARGV[2]); 0 when the key is gone or
--        held by another token; 3 when waiters are queued: nothing is
--        changed, and the caller releases with release.lua, which gives
--        the turn to the first in line; 4 the same, because the script
--        may not call EXISTS (an ACL without it: release.lua does without).
--        A lock key of another type is not ours (GET's error reply).
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local queued = redis.pcall('EXISTS', KEYS[2])
if queued ~= 0 then
  return type(queued) == 'number' and 3 or 4
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
