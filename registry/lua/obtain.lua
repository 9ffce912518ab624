-- obtain: take the lock if it is free and not another waiter's turn;
-- otherwise queue the caller (unless it does not wait) and say how long it
-- sleeps before it tries again by itself. Runs after prelude.lua.
--
-- KEYS[1]  lock key (registryKey:key)
-- KEYS[2]  wait queue (sorted set; see prelude.lua)
-- KEYS[3]  wait queue info (hash)
-- KEYS[4]  turn
-- KEYS[5]  wait queue of the pollers (sorted set)
-- KEYS[6]  fence counter
-- ARGV[1]  token, unique to this acquisition
-- ARGV[2]  time to live in ms
-- ARGV[3]  waiter id: registryId/n, one per lock instance
-- ARGV[4]  how the caller waits if it fails: 0 it does not (TryLock: it
--          never queues), 1 it polls (SpinLock), 2 it is woken by the
--          release message (PubSubLock)
-- ARGV[5]  the caller's poll interval in ms
-- ARGV[6]  jitter in ms, taken off a full poll interval
-- ARGV[7]  1 to take a fencing token, 0 not to
-- ARGV[8]  release channel (registryKey-channel:lockKey)
-- ARGV[9]  a listening waiter's turn, in ms
-- ARGV[10] how soon (ms) a polling waiter must be due to get a turn
-- ARGV[11] ms added to a polling waiter's turn
-- ARGV[12] the caller's round trip in ms (when its next try will reach the
--          server, after its sleep)
--
-- A free key with no live turn goes to the first waiter in line that is
-- sure to try soon (prelude.lua, nextTurn; the caller's own entry counts as
-- such). If that is another waiter, it gets its turn and is told (a release
-- message on ARGV[8], which a Spring waiter takes for a release: it tries,
-- harmlessly), and the caller is refused. With no such waiter the key goes
-- to the caller; if the caller was queued, a message tells the waiters
-- behind it that they moved up.
--
-- Reply: {1, fence} acquired; fence is the new fencing token (strictly
--        increasing per key), or 0 without fencing. The caller leaves the
--        queue. The same, with the current token, when the key already
--        holds ARGV[1]: a client that resent this script (or a SET) after
--        a lost reply gets the lock it took.
--        {0, sleep, after} another holder has the key; {2, sleep, after}
--        the key is free but it is another waiter's turn. sleep: ms until
--        the caller tries again by itself (pause). after: the number of
--        release messages after which the caller's turn may have come, or
--        -1 when it is not queued (ARGV[4] 0, or no TIME). Every turn is
--        announced by one message, and goes to a waiter ahead of the
--        caller until its own: after is the number of listeners ahead of
--        it + 1 (see enqueue; a message this script sent announces the
--        turn of the first in line, who is counted), less one when a turn
--        announced before this script runs (its message is past), plus the
--        messages this script sent for waiters it dropped (they are no
--        longer counted).
-- Error: WRONGTYPE when KEYS[1] holds something other than a string
--        ("WRONGTYPE lock key holds a TYPE", where TYPE may be read).
local token, id = ARGV[1], ARGV[3]
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  local t = redis.pcall('TYPE', KEYS[1]) -- for the error's words: lockyard's other kinds are named by their types
  return redis.error_reply('WRONGTYPE lock key holds a ' .. (t.ok or 'value that is not a string'))
end
if value == token then
  local fence = 0
  if ARGV[7] == '1' then
    fence = tonumber(redis.call('GET', KEYS[6]) or '0')
  end
  return {1, fence}
end
if not value and not redis.pcall('GET', KEYS[4]) and queueEmpty(KEYS[2]) then
  -- Free, nobody's turn, nobody waiting: the key is the caller's.
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  if ARGV[7] == '1' then -- held, with a fencing token
    local _, nextFence = shared()
    return {1, nextFence(KEYS[6])}
  end
  return {1, 0}
end

if value and ARGV[4] == '0' then
  -- Another holder has the key, and the caller does not wait (TryLock):
  -- refused before any rule is defined, with the sleep the full path
  -- would give a caller not in line.
  return {0, pause(redis.call('PTTL', KEYS[1]), 2, nil, ARGV[5] + 0, ARGV[6] + 0), -1}
end

-- The lean refusal: another holder has the key and the caller waits. It
-- is queued (or keeps its place), and told how long it sleeps and after
-- how many release messages its turn may come, in the calls that the
-- general path below makes in that case (turnOf, enqueue, pause, describe
-- in prelude.lua), without defining a rule. It ends where a queue key
-- holds another type or a turn is to be deleted, before it has written
-- anything that the general path would not write the same; the general
-- path then takes over. lean_test.go runs both paths on random states and
-- requires the same replies, keys and messages.
repeat -- lean refusal
  if not value then
    break
  end
  local turn = redis.pcall('GET', KEYS[4])
  if type(turn) == 'table' then -- another type: deleted
    break
  elseif turn then
    local left = redis.call('PTTL', KEYS[4])
    if left < 0 or left > 60000 then -- a turn for nobody: deleted
      break
    end
  end
  local pttl = redis.call('PTTL', KEYS[1])
  local now = clock()
  if not now then
    break
  end
  local mode, kind, order, info, polls = ARGV[4] + 0, 'p', KEYS[2], KEYS[3], KEYS[5]
  if mode == 0 then -- does not wait after all (a 0 spelled otherwise): the rules decide
    break
  elseif mode == 2 then
    kind = 'l'
  end
  local f = string.format
  local since = redis.pcall('ZSCORE', order, id) -- enqueue: a waiter keeps its place
  if type(since) == 'table' then
    break
  elseif not since then
    since = f('%.3f', now)
    redis.call('ZADD', order, since, id)
  end
  local ahead = 0
  if kind == 'p' then
    if type(redis.pcall('ZADD', polls, 'NX', since, id)) ~= 'number' then
      break
    end
    ahead = redis.call('ZRANK', order, id) or 0
  else
    local c = redis.pcall('ZCOUNT', polls, '-inf', since)
    if type(c) ~= 'number' then
      break
    end
    ahead = math.max(0, (redis.call('ZRANK', order, id) or 0) - c)
  end
  local idle = ARGV[5] + 0
  local sleep = pause(pttl, ahead, nil, idle, ARGV[6] + 0)
  local due = now + sleep + ARGV[12] -- when its next try reaches the server
  local lapse = due + idle
  if type(redis.pcall('HSET', info, id, kind .. ' ' .. f('%d', due) .. ' ' .. f('%d', lapse))) ~= 'number' then
    break
  end
  keepAlive({order, info, kind == 'p' and polls or nil}, now, lapse)
  if turn and turn ~= id then
    ahead = ahead - 1 -- the message of that turn is past: one fewer to count
  end
  do
    return {0, sleep, math.max(ahead, 0) + 1}
  end
until true
local clock, nextFence, queueRules = shared()
local R = queueRules()
local q = {order = KEYS[2], info = KEYS[3], turn = KEYS[4], polls = KEYS[5]}
local rules = {window = ARGV[9] + 0, ahead = ARGV[10] + 0, slack = ARGV[11] + 0, look = 4}
local mode, idle, spread = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0

local now, turn = nil, R.turnOf(q)
local past = turn and turn ~= id -- a turn announced before this script
local extra = 0 -- messages this script sends that announce no turn of a waiter ahead
if not value then
  if not turn then
    local next, n, moved
    next, n, now, moved = R.nextTurn(q, nil, rules, id)
    extra = moved
    if next and next ~= id then
      R.grant(q, next, n)
      moved = moved + 1
      turn = next
    end
    R.announce(ARGV[8], KEYS[1], moved)
  end
  if not turn or turn == id then
    redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
    if turn then -- its turn, announced when it was given
      redis.call('DEL', q.turn)
      R.drop(q, id)
    elseif R.drop(q, id) then -- a queued waiter took a free key unannounced: those behind move up
      R.announce(ARGV[8], KEYS[1], 1)
    end
    return {1, ARGV[7] == '1' and nextFence(KEYS[6]) or 0} -- held, with a fencing token if asked for
  end
end

-- Not acquired: the key is held (0), or free for another's turn (2).
local status, pttl, turnLeft = 0, -2, nil
if value then
  pttl = redis.call('PTTL', KEYS[1])
else
  status, turnLeft = 2, math.max(redis.call('PTTL', q.turn), 0)
end
now = now or clock()
if mode == 0 or not now then
  return {status, R.pause(pttl, 2, turnLeft, idle, spread), -1}
end
local kind = 'p'
if mode == 2 then
  kind = 'l'
end
local ahead = R.enqueue(q, id, kind, now)
local sleep = R.pause(pttl, ahead, turnLeft, idle, spread)
local due = now + sleep + ARGV[12] -- when its next try reaches the server
R.describe(q, id, kind, now, due, due + idle)
if past then
  ahead = ahead - 1 -- the message of that turn is past: one fewer to count
end
return {status, sleep, math.max(ahead, 0) + 1 + extra}
