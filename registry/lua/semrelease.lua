-- semrelease: give back a permit of a semaphore if this holder still has
-- it, and give the turns of the permits now free to the waiters in line
-- (prelude.lua, permitRules), each listener told on its registry's turn
-- channel. With nobody in line nothing is published. Runs after
-- prelude.lua.
--
-- KEYS     as semacquire.lua: semaphore key, wait queue, queue info, turn
--          (unused), pollers, fence counter; or the semaphore key alone,
--          while their Cluster slot migrates (as release.lua): the permit
--          is given back, and the waiters, told no turn, find it free when
--          they next try (a fenced semaphore's counter is then left to its
--          TTL)
-- ARGV[1]  token of the permit
-- ARGV[2]  turn prefix (as semacquire.lua's ARGV[8])
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
-- ARGV[6]  permits
-- ARGV[7]  1 when the semaphore is fenced: the last permit given back,
--          with nobody in line, deletes the fence counter too (the next
--          acquisition seeds it from the clock again: see nextFence)
-- ARGV[8]  1 when the permit was given back already, by a plain ZREM
--          that found waiters queued (semProto.releasePlain), or may have
--          been: give the turns of the free permits only (ARGV[1] unused)
--
-- Reply: 1 given back; 2 the same, and waiters are queued; 0 the permit
--        was gone (pruned after it expired), or the key is not a sorted
--        set: nothing changes. A permit that expired but was not pruned
--        yet is given back as one that had not: the releasing client
--        learns of the loss from its own deadline, which ends before the
--        permit's expiry.
if ARGV[8] ~= '1' and redis.pcall('ZREM', KEYS[1], ARGV[1]) ~= 1 then
  return 0
end
if #KEYS == 1 then
  return 2
end
-- forget deletes the fence counter of a fenced semaphore that nobody
-- holds or waits for.
local function forget()
  if ARGV[7] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[6])
  end
end
if queueEmpty(KEYS[2]) then
  forget()
  return 1
end
local clock, _, queueRules, permitRules = shared()
local now = clock()
if not now then
  return 2
end
local R = queueRules()
local P = permitRules()
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
local free = ARGV[6] - P.live(KEYS[1], now)
P.offer(R, q, KEYS[1], now, free, ARGV[2], {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0}, KEYS[6], '#' .. ARGV[6])
if queueEmpty(KEYS[2]) then
  forget()
  return 1
end
return 2
