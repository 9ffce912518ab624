-- semnudge: a lease left its permit to expire (ReleaseAfter), and no
-- release will tell the waiters in line. Once the permit has expired, give
-- it back and the turns of the free permits to the waiters in line, as
-- semrelease.lua does. Runs after prelude.lua.
--
-- KEYS     as semacquire.lua: semaphore key, wait queue, queue info, turn
--          (unused), pollers, fence counter
-- ARGV[1]  token of the permit
-- ARGV[2]  turn prefix (as semacquire.lua's ARGV[8])
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
-- ARGV[6]  permits
-- ARGV[7]  1 when the semaphore is fenced (as semrelease.lua's)
--
-- Reply: the ms the permit has left when it has not expired yet (nothing
--        is changed); else -1: it was given back (and the turns told), or
--        it was gone (an attempt pruned it, and gave the turns itself).
local score = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(score) ~= 'string' then
  return -1
end
local clock, _, queueRules, permitRules = shared()
local now = clock()
if not now then
  return -1
end
if (score + 0) > now then
  return math.ceil(score - now)
end
redis.call('ZREM', KEYS[1], ARGV[1])
if queueEmpty(KEYS[2]) then
  if ARGV[7] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[6]) -- nobody holds or waits (as semrelease.lua)
  end
  return -1
end
local P = permitRules()
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
local free = ARGV[6] - P.live(KEYS[1], now)
P.offer(queueRules(), q, KEYS[1], now, free, ARGV[2], {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0}, KEYS[6], '#' .. ARGV[6])
return -1
