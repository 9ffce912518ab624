-- nudge: a lease left its key to expire (ReleaseAfter), and no release
-- will tell the waiters; or a native release (native.go) found waiters,
-- and gave no turn. Once the key has expired, give the turn to the next
-- waiter in line and publish the release message, as release.lua does
-- (less those already published). Runs after prelude.lua.
--
-- KEYS     as obtain.lua, without the fence counter: lock key, wait queue,
--          queue info, turn, pollers
-- ARGV[1]  token of the lease
-- ARGV[2]  release channel
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
-- ARGV[6]  release messages already published for this free key: 1 after
--          a native release (native.go), which published one and gave no
--          turn; absent: 0
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
local _, _, queueRules = shared()
local R = queueRules()
local q = {order = KEYS[2], info = KEYS[3], turn = KEYS[4], polls = KEYS[5]}
if R.turnOf(q) then
  return -1
end
local next, n, _, moved = R.nextTurn(q, nil, {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0, look = 4})
if next then
  R.grant(q, next, n)
end
R.announce(ARGV[2], KEYS[1], moved + 1 - (tonumber(ARGV[6]) or 0))
return -1
