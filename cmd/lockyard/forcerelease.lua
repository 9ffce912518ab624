-- force release (lockyard release --force): delete a lock key whatever
-- its value, and tell waiters, as a release does; or take permits out of
-- a semaphore key (a sorted set: token -> expiry), every one, or those of
-- one holder.
--
-- KEYS[1]  lock key (registryKey:key)
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
-- held. Error: WRONGTYPE for a key of another type.
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  return {false, -2}
end
if t == 'zset' then
  local removed = 0
  if ARGV[2] == '' then
    removed = redis.call('ZCARD', KEYS[1])
    redis.call('DEL', KEYS[1])
  else
    local prefix = ARGV[2] .. ':'
    for _, token in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
      if string.sub(token, 1, #prefix) == prefix and not string.find(token, ':', #prefix + 1, true) then
        removed = removed + redis.call('ZREM', KEYS[1], token)
      end
    end
  end
  return {'semaphore', removed, redis.call('ZCARD', KEYS[1])}
end
if t ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lockyard lock or semaphore')
end
local v = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -1 and ARGV[3] ~= '1' then
  return {v, pttl, 'foreign'} -- no lock: nothing removed
end
if ARGV[2] ~= '' then
  local prefix = ARGV[2] .. ':'
  if string.sub(v, 1, #prefix) ~= prefix or string.find(v, ':', #prefix + 1, true) then
    return {v, pttl, 'kept'} -- another holder's: nothing removed
  end
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], KEYS[1])
return {v, pttl}
