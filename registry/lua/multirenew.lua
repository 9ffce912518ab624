-- multirenew: reset the time to live of every lock key of KEYS that the
-- token holds. A key it no longer holds is left alone: the hold is lost,
-- and its release gives back the others.
--
-- KEYS     the lock keys
-- ARGV[1]  token of the multi-key hold
-- ARGV[2]  time to live in ms
--
-- Reply: one integer per lock key, in order: 1 renewed, 0 the key was gone
--        or another holder's.
local out = {}
for i = 1, #KEYS do
  out[i] = 0
  if redis.pcall('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    out[i] = 1
  end
end
return out
