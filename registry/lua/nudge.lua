-- nudge: a lease left its key to expire (ReleaseAfter), and no release
-- will tell the waiters. Once the key has expired, give the turn to the
-- next waiter in line and publish the release message, as release.lua
-- does. Runs after prelude.lua.
--
-- KEYS     as obtain.lua: lock key, fence counter (unused), wait queue,
--          queue info, turn, pollers
-- ARGV[1]  token of the lease
-- ARGV[2]  release channel
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: the ms the lease's key has left when it has not expired yet
--        (nothing is changed); else -1: the key was free (the turn given
--        and the message published, unless a turn was running), or held
--        by another token (nothing is changed).
local value = redis.pcall('GET', KEYS[1])
if value == ARGV[1] then
  return math.max(redis.call('PTTL', KEYS[1]), 0)
end
if value then
  return -1
end
local q = {order = KEYS[3], info = KEYS[4], turn = KEYS[5], polls = KEYS[6]}
if turnOf(q) then
  return -1
end
local next, n, _, moved = nextTurn(q, nil, {window = tonumber(ARGV[3]), ahead = tonumber(ARGV[4]), slack = tonumber(ARGV[5]), look = 4})
if next then
  grant(q, next, n)
end
announce(ARGV[2], KEYS[1], moved + 1)
return -1
