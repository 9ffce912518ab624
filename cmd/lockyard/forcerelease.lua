-- force release (lockyard release --force): delete a lock key whatever
-- its value, and tell waiters, as a release does; or take permits out of
-- a semaphore key (a sorted set: token -> expiry), every one, or those of
-- one holder; or take a read-write lock's writer or readers out (a hash,
-- and its readers: token -> expiry), every one, or those of one holder.
--
-- KEYS[1]  lock key (registryKey:key)
-- KEYS[2]  its readers, when it is a read-write lock's key
-- ARGV[1]  channel: registryKey-channel:registryKey:key
-- ARGV[2]  a holder's registry id: only its permits are taken out of a
--          semaphore, and a lock key only if it holds it ('' for any)
-- ARGV[3]  '1': remove a string without a TTL too (no lock key lacks one)
--
-- Reply: {value, pttl} of the lock key removed; {value, pttl, 'kept'} when
-- it is another holder's than ARGV[2] (nothing removed); {value, -1,
-- 'foreign'} for a string without a TTL and ARGV[3] not '1' (nothing
-- removed); {false, -2} if
-- there was none; {'semaphore', n, left}: n permits taken out of a semaphore, left
-- held; {'rwlock', n, left}: the same for a read-write lock's holders.
-- Error: WRONGTYPE for a key of another type.
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  return {false, -2}
end
-- mine reports whether token is a holder's of ARGV[2] (any, for '').
local function mine(token)
  if ARGV[2] == '' then
    return true
  end
  local prefix = ARGV[2] .. ':'
  return string.sub(token, 1, #prefix) == prefix and not string.find(token, ':', #prefix + 1, true)
end
if t == 'zset' then
  local removed = 0
  if ARGV[2] == '' then
    removed = redis.call('ZCARD', KEYS[1])
    redis.call('DEL', KEYS[1])
  else
    for _, token in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
      if mine(token) then
        removed = removed + redis.call('ZREM', KEYS[1], token)
      end
    end
  end
  return {'semaphore', removed, redis.call('ZCARD', KEYS[1])}
end
if t == 'hash' then
  local v = redis.call('HMGET', KEYS[1], 'w', 'r')
  if not v[1] and not v[2] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a hash, not a lockyard lock, semaphore or read-write lock')
  end
  local removed, left = 0, 0
  if v[1] and mine(v[1]) then
    removed = 1
    redis.call('DEL', KEYS[1])
  elseif v[1] then
    left = 1
  else
    for _, token in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      if mine(token) then
        removed = removed + redis.call('ZREM', KEYS[2], token)
      end
    end
    left = redis.call('ZCARD', KEYS[2])
    if left == 0 then
      redis.call('DEL', KEYS[1])
    end
  end
  return {'rwlock', removed, left}
end
if t ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lockyard lock or semaphore')
end
local v = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -1 and ARGV[3] ~= '1' then
  return {v, pttl, 'foreign'} -- no lock: nothing removed
end
if not mine(v) then
  return {v, pttl, 'kept'} -- another holder's: nothing removed
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], KEYS[1])
return {v, pttl}
