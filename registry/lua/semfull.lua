-- semfull: whether every permit of a semaphore is held and live, asked by
-- a TryAcquire of an instance whose last attempt found it so (semstate.go,
-- tryFull): then it is refused without semacquire.lua, whose arguments and
-- rules cost the server about three times this script's work for the same
-- refusal (a TryAcquire that a busy semaphore keeps refusing). No prelude.
--
-- KEYS[1]  semaphore key
-- ARGV[1]  permits
--
-- Reply: 1 when at least ARGV[1] permits are held and none of them has
--        expired, on the server's clock (as semacquire.lua counts them:
--        ZCOUNT of the scores after the whole ms); 0 otherwise, or when
--        the key is not a sorted set or the script may not call TIME:
--        the caller then runs semacquire.lua, which takes a free permit,
--        gives the right error, or refuses as it always did.
local n = redis.pcall('ZCARD', KEYS[1])
local permits = ARGV[1] + 0
if type(n) ~= 'number' or n < permits then
  return 0
end
local t = redis.pcall('TIME')
if type(t) ~= 'table' or t.err then
  return 0
end
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now), '+inf') >= permits then
  return 1
end
return 0
