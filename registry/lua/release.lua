-- release: delete the lock only if this holder still owns it, give the
-- turn to the next waiter in line (prelude.lua, nextTurn), and tell
-- waiters (Spring RedisLockRegistry compatible channel and payload). Runs
-- after prelude.lua.
--
-- KEYS     as obtain.lua, without the fence counter: lock key, wait queue,
--          queue info, turn, pollers; or the lock key alone, while their
--          Cluster slot migrates (a script on keys that one node does not
--          all have is refused, TRYAGAIN, and the turn and pollers keys
--          seldom exist): the key is deleted and the message published,
--          and the waiters, told no turn, take the free key when they
--          next try (obtain.lua), as after a Spring client's release
-- ARGV[1]  token of the hold being released
-- ARGV[2]  release channel (registryKey-channel:lockKey)
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: 1 when the key was ours and is deleted (a message carrying
--        KEYS[1] was published on ARGV[2]); 2 the same, and waiters are
--        queued, or may be (the lock key alone: the releasing instance's
--        next acquisition then starts with obtain.lua, which respects
--        their turns); 0 when the key is
--        gone or held by another token, in which case nothing is changed.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if #KEYS == 1 then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 2
end
if queueEmpty(KEYS[2]) then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
-- The lean turn: the first in line is a live waiter that is sure to try
-- soon (a listener, or a poller due soon): what nextTurn, grant and
-- announce do in that case (prelude.lua), in the same calls but one (ZRANGE
-- of one entry, not four), without defining a rule: its turn is marked
-- unless it was, the turn key set, and one message published. Any other
-- first entry (lapsed, unreadable, a poller passed over) is left to the
-- general path before anything is written. lean_test.go runs both paths on
-- random states and requires the same replies, keys and messages.
repeat -- lean turn
  local now = clock()
  local id, kind, due, lapse, ended, sure = nil, nil, nil, nil, nil, nil
  if now then
    id, kind, due, lapse, ended, sure = firstLive(KEYS[2], KEYS[3], now, ARGV[3], ARGV[4], ARGV[5])
  end
  if not id or not sure then -- nobody, an entry to drop, or a poller passed over: the rules decide
    break
  end
  local n = ARGV[3] + 0
  if kind == 'p' then
    n = math.max(due - now, 0) + ARGV[5]
  end
  local f = string.format
  if ended == 0 then
    redis.call('HSET', KEYS[3], id, f('%s %d %d %d', kind, due, lapse, now + n))
  end
  redis.call('SET', KEYS[4], id, 'PX', f('%d', math.max(1, n)))
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  do
    return 2
  end
until true
local _, _, queueRules = shared()
local R = queueRules()
local q = {order = KEYS[2], info = KEYS[3], turn = KEYS[4], polls = KEYS[5]}
local next, n, _, moved, empty = R.nextTurn(q, nil, {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0, look = 4})
if next then
  R.grant(q, next, n)
end
R.announce(ARGV[2], KEYS[1], moved + 1)
if next or not empty then
  return 2
end
return 1
