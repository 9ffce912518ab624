-- multitake: the quick form of multiacquire.lua, for a caller in no line
-- (the first attempt, TryAcquireAll, a patient waiter): take every lock
-- key for the token if each is free (or the token's) with nobody's turn
-- and nobody in line; say which keys other holders have; and leave every
-- other case to multiacquire.lua, which knows the lines. It declares
-- three keys per lock key (four with fencing), not six, and when no key
-- of them exists it runs one EXISTS and a SET per key: the uncontended
-- acquisition costs the server less (bench/multi).
--
-- KEYS     N lock keys, in the caller's order; then their turns, then
--          their wait queues (N each); then, with fencing only, their
--          fence counters
-- ARGV[1]  token
-- ARGV[2]  time to live in ms
-- ARGV[3]  1 to take a fencing token of each key, 0 not to
-- ARGV[4]  the caller's poll interval in ms
-- ARGV[5]  jitter in ms, taken off a full poll interval
--
-- Reply: 1 acquired, without fencing; {1, fence1, ..., fenceN} acquired
--        with fencing, as multiacquire.lua's.
--        {0, sleep, -1, taken, h1, ..., hN} another holder has taken of
--        the keys: hI is 1 for each of them; sleep: ms until the first of
--        them expires, if sooner than a poll.
--        {3} a key is free but not plainly (a turn, a line, a key of
--        another type): multiacquire.lua decides.
local fencing = ARGV[3] == '1'
local n = #KEYS / (fencing and 4 or 3)
local e = redis.pcall('EXISTS', unpack(KEYS, 1, 3 * n))
if e == 0 and not fencing then -- no key, turn or line: every key is free
  for i = 1, n do
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
  return 1
end
local values, mine = {}, 0
if e ~= 0 then
  values = redis.pcall('MGET', unpack(KEYS, 1, n))
  if type(values) ~= 'table' or values.err then
    return {3}
  end
  local taken = 0
  for i = 1, n do
    if values[i] == ARGV[1] then
      mine = mine + 1
    elseif values[i] then
      taken = taken + 1
    end
  end
  if e ~= mine + taken then
    return {3} -- a turn, a line, or a key of another type
  end
  if taken > 0 then
    -- It sleeps until the first of the held keys expires, if that is
    -- sooner than its poll.
    local reply, sleep = {0, 0, -1, taken}, math.max(1, ARGV[4] - ARGV[5])
    for i = 1, n do
      reply[4 + i] = (values[i] and values[i] ~= ARGV[1]) and 1 or 0
      if reply[4 + i] == 1 then
        local pttl = redis.call('PTTL', KEYS[i])
        if pttl >= 0 and pttl < sleep then
          sleep = pttl + 1
        end
      end
    end
    reply[2] = sleep
    return reply
  end
end
for i = 1, n do
  if values[i] ~= ARGV[1] then
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  else -- the caller's already (a resend): its time to live starts now, as the caller counts it
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
if not fencing then
  return 1
end
local _, nextFence = shared()
local reply = {1}
for i = 1, n do
  if mine == n then
    reply[i + 1] = tonumber(redis.call('GET', KEYS[3 * n + i]) or '0')
  else
    reply[i + 1] = nextFence(KEYS[3 * n + i])
  end
end
return reply
