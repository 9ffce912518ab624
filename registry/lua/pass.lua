-- pass: the holder's lock instance has goroutines waiting for the lock.
-- Keep the key for them (resetting its time to live), unless a waiter of
-- another instance is in line for a turn (prelude.lua, nextTurn) or the
-- holder's run of local holds has reached its bound (ARGV[12]): then
-- release the key as release.lua does, and, when another waiter gets the
-- turn, queue the holder's instance behind it. Runs after prelude.lua.
--
-- KEYS     as obtain.lua: lock key, wait queue, queue info, turn, pollers,
--          fence counter
-- ARGV[1]  token of the hold being passed
-- ARGV[2]  time to live in ms, for the next holder
-- ARGV[3]  waiter id of the holder's lock instance
-- ARGV[4]  how that instance waits: 1 it polls, 2 it is woken by the
--          release message
-- ARGV[5]  its poll interval in ms
-- ARGV[6]  jitter in ms, taken off a full poll interval
-- ARGV[7]  1 to take a fencing token for the next holder, 0 not to
-- ARGV[8]  release channel
-- ARGV[9]  a listening waiter's turn, in ms
-- ARGV[10] how soon (ms) a polling waiter must be due to get a turn
-- ARGV[11] ms added to a polling waiter's turn
-- ARGV[12] 1 to release even if nobody is in line (the run of local
--          holds is over: a client that writes no queue entry, such as
--          Spring's, may take the key), 0 not to
-- ARGV[13] the holder's round trip in ms (when a poller's next try will
--          reach the server, after its sleep)
--
-- Reply: {1, fence} kept: the time to live is reset; fence is the next
--        holder's fencing token (0 without fencing).
--        {2, sleep, after} released for another waiter's turn (a message
--        carrying KEYS[1] is published on ARGV[8]); the holder's instance
--        is queued: sleep and after as in obtain.lua (after counts the
--        messages sent for waiters dropped on the way).
--        {3} released, with nobody in line.
--        {0} the key is gone or held by another token: nothing changed.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
if queueEmpty(KEYS[2]) then -- nobody in line
  if ARGV[12] == '1' then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[8], KEYS[1])
    return {3}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[7] == '1' then -- held, with a fencing token
    local _, nextFence = shared()
    return {1, nextFence(KEYS[6])}
  end
  return {1, 0}
end
local _, nextFence, queueRules = shared()
local R = queueRules()
local q = {order = KEYS[2], info = KEYS[3], turn = KEYS[4], polls = KEYS[5]}
local rules = {window = ARGV[9] + 0, ahead = ARGV[10] + 0, slack = ARGV[11] + 0, look = 4}
local next, n, now, moved = R.nextTurn(q, nil, rules)
if next == ARGV[3] then -- a stale entry of the holder's own instance
  R.drop(q, next)
  local more
  next, n, now, more = R.nextTurn(q, now, rules)
  moved = moved + more
end
if next or ARGV[12] == '1' then
  redis.call('DEL', KEYS[1])
  if next then
    R.grant(q, next, n)
  end
  R.announce(ARGV[8], KEYS[1], math.max(1, moved + (next and 1 or 0)))
  if not next then
    return {3}
  end
  local idle = ARGV[5] + 0
  local kind = 'p'
  if ARGV[4] == '2' then
    kind = 'l'
  end
  local ahead = R.enqueue(q, ARGV[3], kind, now)
  -- Next in line: try again when the turn just given ends, in case its
  -- waiter does not take it.
  local sleep = R.pause(-1, ahead, n, idle, ARGV[6] + 0)
  local due = now + sleep + ARGV[13]
  R.describe(q, ARGV[3], kind, now, due, due + idle)
  return {2, sleep, ahead + 1 + moved}
end
R.announce(ARGV[8], KEYS[1], moved)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, ARGV[7] == '1' and nextFence(KEYS[6]) or 0} -- held, with a fencing token if asked for
