-- rwrelease: give back a read-write lock's hold if this holder still has
-- it (the writer's key, or a reader's entry), and give the turns of the
-- line to the waiters that may enter now (rwrules.lua, walk), each
-- listener told on its registry's turn channel. Runs after prelude.lua and
-- rwrules.lua.
--
-- KEYS     as rwacquire.lua
-- ARGV[1]  token of the hold
-- ARGV[2]  turn prefix (as rwacquire.lua's ARGV[8])
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: 1 given back; 2 the same, and waiters are in line; 0 the hold
--        was gone (expired, or taken by another), or the key is not a
--        hash: nothing changes. A reader's entry that expired but was
--        not pruned yet is given back as one that had not.
local v = redis.pcall('HMGET', KEYS[1], 'w', 'r')
if v.err then
  return 0
end
local writer = v[1]
if writer == ARGV[1] then
  redis.call('DEL', KEYS[1])
  writer = false
elseif writer or not v[2] or redis.call('ZREM', KEYS[7], ARGV[1]) ~= 1 then
  return 0
end
if queueEmpty(KEYS[2]) then
  if v[2] and not writer and redis.call('ZCARD', KEYS[7]) == 0 then
    redis.call('DEL', KEYS[1]) -- the last reader
  end
  return 1
end
local clock, _, queueRules, permitRules, tell = shared()
local now = clock()
if not now then
  return 2
end
local R = queueRules()
local RW = rwRules()
local held = 0
if not writer then
  held = RW.readers(KEYS[1], KEYS[7], v[2], now)
end
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
local _, told, behind = RW.walk(R, q, now, {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0}, nil, 'r', writer, held)
if #told > 0 then
  RW.deliver(R, q, KEYS[1], KEYS[7], told, now, ARGV[2], KEYS[6], behind, tell, permitRules)
end
return 2
