-- multirenew: reset the time to live of every lock key of KEYS that the
-- token holds. A key it no longer holds is left alone: the hold is lost,
-- and its release gives back the others.
--
-- KEYS     the lock keys
-- ARGV[1]  token of the multi-key hold
-- ARGV[2]  time to live in ms
--
-- Reply: how many of the keys the token held (renewed).
local held = 0
for i = 1, #KEYS do
  if redis.pcall('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    held = held + 1
  end
end
return held
