-- leave: take a waiter that stopped waiting out of the queue, so that no
-- turn is given to it. If it was in line for a lock key, the waiters
-- behind it move up: a release message tells them (and, if the key is
-- free, the next one gets its turn first); for a semaphore, the waiters
-- first in line get the turns of the free permits (a turn given to the
-- waiter that left passes on), each listener told on its turn channel.
-- Runs after prelude.lua.
--
-- KEYS     as obtain.lua, without the fence counter: lock key, wait queue,
--          queue info, turn, pollers; for a semaphore, as semacquire.lua
--          (the semaphore key, and the fence counter last)
-- ARGV[1]  waiter id
-- ARGV[2]  release channel (unused for a semaphore)
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
-- ARGV[6]  a semaphore's waiter: 's', or 'f' when it is fenced (then,
--          when the queue is left empty and no permit is held, the fence
--          counter KEYS[6] is deleted too, as semrelease.lua does); KEYS[1]
--          is then the semaphore key, and it has no turn key
-- ARGV[7]  a semaphore's permits
-- ARGV[8]  a semaphore's turn prefix (as semacquire.lua's ARGV[8])
--
-- Reply: 1 when its entry was removed, 0 when it had none.
local clock, _, queueRules, permitRules = shared()
local R = queueRules()
local q = {order = KEYS[2], info = KEYS[3], turn = KEYS[4], polls = KEYS[5]}
if not R.qcall('ZRANK', q.order, ARGV[1]) then
  return 0
end
R.drop(q, ARGV[1])
if R.turnOf(q) == ARGV[1] then
  redis.call('DEL', q.turn)
end
if (R.qcall('ZCARD', q.order) or 0) == 0 then
  if ARGV[6] == 'f' and redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[6])
  end
  return 1
end
if ARGV[6] then
  -- A semaphore: any turn that it held passes on (admit gives the turns of
  -- the free permits to the first in line, skipping those already told).
  local now, held = clock(), redis.pcall('ZCARD', KEYS[1])
  if now and type(held) == 'number' then -- a sorted set (P.live raises on another type)
    local P = permitRules()
    local free = ARGV[7] - P.live(KEYS[1], now)
    P.offer(R, q, KEYS[1], now, free, ARGV[8], {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0}, KEYS[6], '#' .. ARGV[7])
  end
  return 1
end
local moved = 1 -- the waiters behind it move up a place
if not redis.pcall('GET', KEYS[1]) and not R.turnOf(q) then
  local next, n, _, more = R.nextTurn(q, nil, {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0, look = 4})
  if next then
    R.grant(q, next, n)
    more = more + 1
  end
  moved = moved + more
end
R.announce(ARGV[2], KEYS[1], moved)
return 1
