-- semrenew: reset the expiry of a semaphore's permit, only if this holder
-- still has it and it has not expired.
--
-- KEYS[1]  semaphore key (sorted set: token -> expiry, server ms)
-- ARGV[1]  token of the permit
-- ARGV[2]  time to live in ms
--
-- Reply: 1 when renewed; 0 when the permit is gone or had expired (it is
--        removed), in which case nothing else is changed.
local score = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(score) ~= 'string' then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
if (score + 0) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local ttl = ARGV[2] + 0
redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
