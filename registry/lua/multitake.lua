-- multitake: the quick form of multiacquire.lua, for a caller in no line
-- (the first attempt, TryAcquireAll, a patient waiter): take every lock
-- key for the token if each is free (or the token's) with nobody's turn
-- and nobody in line; say which keys other holders have; and leave every
-- other case to multiacquire.lua, which knows the lines. It declares
-- four keys per lock key, not six: the uncontended acquisition costs the
-- server less.
--
-- KEYS     four per lock key, in the caller's order: lock key, turn, wait
--          queue, fence counter
-- ARGV[1]  token
-- ARGV[2]  time to live in ms
-- ARGV[3]  1 to take a fencing token of each key, 0 not to
-- ARGV[4]  the caller's poll interval in ms
-- ARGV[5]  jitter in ms, taken off a full poll interval
--
-- Reply: {1, fence1, ..., fenceN} acquired, as multiacquire.lua's.
--        {0, sleep, -1, taken, h1, ..., hN} another holder has taken of
--        the keys: hI is 1 for each of them; sleep: ms until the first of
--        them expires, if sooner than a poll.
--        {3} a key is free but not plainly (a turn, a line, a key of
--        another type): multiacquire.lua decides.
local n = #KEYS / 4
local lks, all = {}, {}
for i = 1, n do
  lks[i] = KEYS[4 * i - 3]
  all[3 * i - 2], all[3 * i - 1], all[3 * i] = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1]
end
local values = redis.pcall('MGET', unpack(lks))
if type(values) ~= 'table' or values.err then
  return {3}
end
local mine, taken = 0, 0
for i = 1, n do
  if values[i] == ARGV[1] then
    mine = mine + 1
  elseif values[i] then
    taken = taken + 1
  end
end
local e = redis.pcall('EXISTS', unpack(all))
if e ~= mine + taken then
  return {3} -- a turn, a line, or a key of another type
end
if taken > 0 then
  -- It sleeps until the first of the held keys expires, if that is sooner
  -- than its poll.
  local reply, sleep = {0, 0, -1, taken}, math.max(1, tonumber(ARGV[4]) - tonumber(ARGV[5]))
  for i = 1, n do
    reply[4 + i] = (values[i] and values[i] ~= ARGV[1]) and 1 or 0
    if reply[4 + i] == 1 then
      local pttl = redis.call('PTTL', lks[i])
      if pttl >= 0 and pttl < sleep then
        sleep = pttl + 1
      end
    end
  end
  reply[2] = sleep
  return reply
end
local reply, fencing = {1}, ARGV[3] == '1'
local nextFence
if fencing then
  local _
  _, nextFence = shared()
end
for i = 1, n do
  if values[i] ~= ARGV[1] then
    redis.call('SET', lks[i], ARGV[1], 'PX', ARGV[2])
  else -- the caller's already (a resend): its time to live starts now, as the caller counts it
    redis.call('PEXPIRE', lks[i], ARGV[2])
  end
  if fencing then
    if mine == n then
      reply[i + 1] = tonumber(redis.call('GET', KEYS[4 * i]) or '0')
    else
      reply[i + 1] = nextFence(KEYS[4 * i])
    end
  else
    reply[i + 1] = 0
  end
end
return reply
