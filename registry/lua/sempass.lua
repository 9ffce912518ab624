-- sempass: the holder of a permit has goroutines of its own process
-- waiting for one. Keep the permit for them (its expiry reset) unless
-- waiters in line need it, or the run of local holds has reached its bound
-- (ARGV[9]): then give it back as semrelease.lua does. Runs after
-- prelude.lua.
--
-- KEYS     as semacquire.lua: semaphore key, wait queue, queue info, turn
--          (unused), pollers, fence counter
-- ARGV[1]  token of the permit
-- ARGV[2]  time to live in ms, for the next holder
-- ARGV[3]  turn prefix (as semacquire.lua's ARGV[8])
-- ARGV[4]  a listening waiter's turn, in ms
-- ARGV[5]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[6]  ms added to a polling waiter's turn
-- ARGV[7]  1 to take a fencing token for the next holder, 0 not to
-- ARGV[8]  permits
-- ARGV[9]  1 to give it back even if nobody is in line, 0 not to
-- ARGV[10] waiter id of the holder's instance: its own entry in line is
--          the lease it passes the permit to, not a waiter to yield to
-- ARGV[11] 1 when more leases of that instance wait than the one the
--          permit passes to: a kept permit leaves the instance's entry in
--          line for them; 0 takes it out
-- ARGV[12] 1 when that entry is in line, as far as the holder knows: the
--          queue is then not tested for being empty (as semacquire.lua's
--          ARGV[15])
--
-- Reply: {1, fence} kept for the next holder (fence: its fencing token, 0
--        without fencing); {2} given back, waiters are in line; {3} given
--        back, nobody in line; {0} the permit was gone or had expired.
local score = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(score) ~= 'string' then
  return {0}
end
local clock, _, queueRules, permitRules = shared()
local now = clock()
if not now or (score + 0) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {0}
end
local fenceKey = nil
if ARGV[7] == '1' then
  fenceKey = KEYS[6]
end
local P = permitRules()
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
local rules = {window = ARGV[4] + 0, ahead = ARGV[5] + 0, slack = ARGV[6] + 0}
if ARGV[9] == '1' then
  -- The run of local holds is over: give the permit back, and the turns
  -- of the free permits to the waiters in line (the holder's own entry
  -- among them), as semrelease.lua does.
  redis.call('ZREM', KEYS[1], ARGV[1])
  if queueEmpty(KEYS[2]) then
    if fenceKey and redis.call('EXISTS', KEYS[1]) == 0 then
      redis.call('DEL', fenceKey) -- nobody holds or waits (as semrelease.lua)
    end
    return {3}
  end
  P.offer(queueRules(), q, KEYS[1], now, ARGV[8] - P.live(KEYS[1], now), ARGV[3], rules, KEYS[6], '#' .. ARGV[8])
  return {2}
end
local keep, R, free, told = true, nil, 0, nil
if ARGV[12] == '1' or not queueEmpty(KEYS[2]) then
  R = queueRules()
  -- Would the waiters in line be admitted with this permit given back?
  -- Then the free permits cover them: keep it. Those told are told last
  -- (deliver): a grant takes an entry out of line, and the offer below
  -- must count them ahead.
  free = ARGV[8] - P.live(KEYS[1], now) + 1
  keep, told = P.admit(R, q, now, free, ARGV[10], rules)
end
local count = '#' .. ARGV[8]
if keep then
  if R then
    if ARGV[11] ~= '1' then
      R.drop(q, ARGV[10])
    end
    if free > 1 then
      -- Permits are free besides this one, and the holder's entry may have
      -- been first in line for them (admit stops at it), or told a turn
      -- that it no longer takes: their turns go to the first in line now.
      P.offer(R, q, KEYS[1], now, free - 1, ARGV[3], rules, KEYS[6], count)
    end
  end
  local fence = P.hold(KEYS[1], ARGV[1], now, ARGV[2] + 0, fenceKey, 1)
  if told then
    P.deliver(R, q, KEYS[1], told, now, ARGV[3], KEYS[6], count)
  end
  return {1, fence}
end
redis.call('ZREM', KEYS[1], ARGV[1])
P.deliver(R, q, KEYS[1], told, now, ARGV[3], KEYS[6], count)
return {2}
