-- leave: take a waiter that stopped waiting out of the queue, so that no
-- turn is given to it. If it was in line for the key, the waiters behind
-- it move up: a release message tells them (and, if the key is free, the
-- next one gets its turn first). Runs after prelude.lua.
--
-- KEYS     as obtain.lua: lock key, fence counter (unused), wait queue,
--          queue info, turn, pollers
-- ARGV[1]  waiter id
-- ARGV[2]  release channel
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: 1 when its entry was removed, 0 when it had none.
local q = {order = KEYS[3], info = KEYS[4], turn = KEYS[5], polls = KEYS[6]}
if not qcall('ZRANK', q.order, ARGV[1]) then
  return 0
end
drop(q, ARGV[1])
if turnOf(q) == ARGV[1] then
  redis.call('DEL', q.turn)
end
if (qcall('ZCARD', q.order) or 0) == 0 then
  return 1
end
local moved = 1 -- the waiters behind it move up a place
if not redis.pcall('GET', KEYS[1]) and not turnOf(q) then
  local next, n, _, more = nextTurn(q, nil, {window = tonumber(ARGV[3]), ahead = tonumber(ARGV[4]), slack = tonumber(ARGV[5]), look = 4})
  if next then
    grant(q, next, n)
    more = more + 1
  end
  moved = moved + more
end
announce(ARGV[2], KEYS[1], moved)
return 1
