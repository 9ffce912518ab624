-- rwrenew: reset the expiry of a read-write lock's hold, only if this
-- holder still has it: the writer's key, or a reader's entry that has not
-- expired.
--
-- KEYS[1]  read-write lock key (a hash, see rwrules.lua)
-- KEYS[2]  its readers (sorted set: token -> expiry, server ms)
-- ARGV[1]  token of the hold
-- ARGV[2]  time to live in ms
--
-- Reply: 1 when renewed; 0 when the hold is gone or had expired (a
--        reader's entry is then removed), in which case nothing else is
--        changed.
local v = redis.pcall('HMGET', KEYS[1], 'w', 'r')
if v.err then
  return 0
end
if v[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v[1] or not v[2] then
  return 0
end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
if (score + 0) <= now then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
local ttl = ARGV[2] + 0
redis.call('ZADD', KEYS[2], string.format('%d', now + ttl), ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
