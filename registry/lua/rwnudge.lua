-- rwnudge: a lease left its hold of a read-write lock to expire
-- (ReleaseAfter), and no release will tell the waiters in line. Once it
-- has expired, give its entry back (a reader's) and the turns of the line
-- to the waiters that may enter now, as rwrelease.lua does. Runs after
-- prelude.lua and rwrules.lua.
--
-- KEYS     as rwacquire.lua
-- ARGV[1]  token of the hold
-- ARGV[2]  turn prefix (as rwacquire.lua's ARGV[8])
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: the ms the hold has left when it has not expired yet (nothing
--        is changed); else -1: the turns were given.
local v = redis.pcall('HMGET', KEYS[1], 'w', 'r')
if v.err then
  return -1
end
if v[1] == ARGV[1] then
  return math.max(redis.call('PTTL', KEYS[1]), 1)
end
local clock, _, queueRules, permitRules, tell = shared()
local now = clock()
if not now then
  return -1
end
if v[2] then
  local score = redis.call('ZSCORE', KEYS[7], ARGV[1])
  if score and (score + 0) > now then
    return math.ceil(score - now)
  elseif score then
    redis.call('ZREM', KEYS[7], ARGV[1])
  end
end
if queueEmpty(KEYS[2]) then
  return -1
end
local R = queueRules()
local RW = rwRules()
local held = 0
if not v[1] then
  held = RW.readers(KEYS[1], KEYS[7], v[2], now)
end
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
local _, told, behind = RW.walk(R, q, now, {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0}, nil, 'r', v[1], held)
if #told > 0 then
  RW.deliver(R, q, KEYS[1], KEYS[7], told, now, ARGV[2], KEYS[6], behind, tell, permitRules)
end
return -1
