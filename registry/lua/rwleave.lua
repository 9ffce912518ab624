-- rwleave: take a waiter of a read-write lock that stopped waiting out of
-- the line, so that no turn is given to it, and give the turns of the line
-- to the waiters that may enter now (a writer that left may have held up
-- the readers behind it). Runs after prelude.lua and rwrules.lua.
--
-- KEYS     as rwacquire.lua
-- ARGV[1]  waiter id
-- ARGV[2]  turn prefix (as rwacquire.lua's ARGV[8])
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: 1 when its entry was removed, 0 when it had none.
local clock, _, queueRules, permitRules, tell = shared()
local R = queueRules()
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
if not R.drop(q, ARGV[1]) then
  return 0
end
local v = redis.pcall('HMGET', KEYS[1], 'w', 'r')
local now = clock()
if v.err or v[1] or not now or queueEmpty(KEYS[2]) then
  return 1
end
local RW = rwRules()
local held = RW.readers(KEYS[1], KEYS[7], v[2], now)
local _, told, behind = RW.walk(R, q, now, {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0}, nil, 'r', false, held)
if #told > 0 then
  RW.deliver(R, q, KEYS[1], KEYS[7], told, now, ARGV[2], KEYS[6], behind, tell, permitRules)
end
return 1
