-- multiacquire: take every lock key of KEYS for one token, all or none: each
-- must be free (or the token's already, after a resend) and not another
-- waiter's turn. Otherwise take none; queue the caller on each key (unless
-- it does not wait), and say how long it sleeps. The keys are those of the
-- mutex (obtain.lua), with its wait queue and turns, so a multi-key holder
-- excludes a RedisLock, a lease and a Spring client of each key, and waits
-- its turn in each key's line with them. Runs after prelude.lua.
--
-- KEYS     six per lock key, in the caller's order, as obtain.lua's: lock
--          key, wait queue, queue info, turn, pollers, fence counter
-- ARGV[1]  token, unique to this acquisition
-- ARGV[2]  time to live in ms
-- ARGV[3]  waiter id: registryId/n, one per multi-key acquisition
-- ARGV[4]  how the caller waits if it fails: 0 it does not (never queued),
--          1 it polls, 2 it is woken by the keys' release messages
-- ARGV[5]  the caller's poll interval in ms
-- ARGV[6]  jitter in ms, taken off a full poll interval
-- ARGV[7]  1 to take a fencing token of each key, 0 not to
-- ARGV[8]  the release channels' prefix (registryKey-channel:): a key's
--          channel is it followed by the lock key
-- ARGV[9]  a listening waiter's turn, in ms
-- ARGV[10] how soon (ms) a polling waiter must be due to get a turn
-- ARGV[11] ms added to a polling waiter's turn
-- ARGV[12] the caller's round trip in ms
-- ARGV[13] 1: the caller gathers: it keeps the turns of the keys it could
--          take, and is given the turns of the others as they free, so
--          that it can take them all at once; 0: it waits for the keys it
--          cannot take and passes the turns of the others on (it stays in
--          their line, not due: it keeps its place); '#I', I a lock key's
--          place in KEYS (from 1): it gathers if that key, the one that
--          kept it out longest, is no longer kept from it. The caller gathers for a
--          bounded time (multiacquire.go), so a free key is kept for it no
--          longer than that.
-- ARGV[14] the caller's place in line (a score of the wait queues), from
--          an earlier reply; '' for none: a line that dropped it takes it
--          back at that place, not at the end.
--
-- Reply: {1, fence1, ..., fenceN} acquired: every key holds the token;
--        each fence is the key's new fencing token (strictly increasing per
--        key), or 0 without fencing. The caller leaves every queue. When
--        every key held the token already, the current fences.
--        {0, sleep, after, blocked} a key is another holder's; {2, sleep,
--        after, blocked} none is, but another waiter's turn keeps one.
--        sleep: ms until the caller tries again by itself; after: the
--        release messages (of all its keys together) after which a turn
--        may have come to it, -1 when it is not queued; blocked: how many
--        of the keys it could not take. When it is queued, one more
--        integer per key follows: the release messages of that key after
--        which its turn at it may have come, 0 for a key it does not wait
--        for (it could take it); then its place in line (ARGV[14]), as a
--        string, and 1 if it gathered, else 0. When it does not queue and another
--        holder has a key, one integer per key follows too: 1 for each
--        key another holder has.
-- Error: WRONGTYPE when a lock key holds something other than a string:
--        "WRONGTYPE lock key #I, the key holds a TYPE" (I: its place in
--        KEYS, from 1).
local token, id, n, fencing = ARGV[1], ARGV[3], #KEYS / 6, ARGV[7] == '1'
local values, mine, clear, taken = {}, 0, true, 0
for i = 1, n do
  local lk = KEYS[6 * i - 5]
  local v = redis.pcall('GET', lk)
  if type(v) == 'table' and v.err then
    local t = redis.pcall('TYPE', lk)
    return redis.error_reply('WRONGTYPE lock key #' .. i .. ', the key holds a ' .. (t.ok or 'value that is not a string'))
  end
  values[i] = v
  if v == token then
    mine = mine + 1
  elseif v then
    clear, taken = false, taken + 1
  elseif redis.pcall('GET', KEYS[6 * i - 2]) or not queueEmpty(KEYS[6 * i - 4]) then
    clear = false
  end
end

local mode, idle, spread, gather = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[13] == '1'
local longest = tonumber(string.match(ARGV[13], '^#(%d+)$') or '0') -- gather once this key frees
if taken > 0 and mode == 0 then
  -- Another holder has a key, and the caller does not queue: nothing to
  -- do with the lines of the free keys (their waiters are told when their
  -- turns come, by the releases). It sleeps until the first of those
  -- keys expires, if that is sooner than its poll.
  local reply, sleep = {0, 0, -1, taken}, math.max(1, idle - spread)
  for i = 1, n do
    reply[4 + i] = (values[i] and values[i] ~= token) and 1 or 0
    if reply[4 + i] == 1 then
      local pttl = redis.call('PTTL', KEYS[6 * i - 5])
      if pttl >= 0 and pttl < sleep then
        sleep = pttl + 1
      end
    end
  end
  reply[2] = sleep
  return reply
end
local clock, nextFence, queueRules = shared()
local function queue(i)
  local b = 6 * i - 5
  return {order = KEYS[b + 1], info = KEYS[b + 2], turn = KEYS[b + 3], polls = KEYS[b + 4]}
end
local function channel(i)
  return ARGV[8] .. KEYS[6 * i - 5]
end
local reply = {1}
if mine == n then
  -- A resend after a lost reply: already the caller's. Its time to live
  -- starts now, as the caller counts it, and the caller leaves the lines.
  local R = queueRules()
  for i = 1, n do
    local q = queue(i)
    redis.call('PEXPIRE', KEYS[6 * i - 5], ARGV[2])
    if R.turnOf(q) == id then
      redis.call('DEL', q.turn)
    end
    R.drop(q, id)
    reply[i + 1] = fencing and tonumber(redis.call('GET', KEYS[6 * i]) or '0') or 0
  end
  return reply
end
if clear then -- every key free (or the caller's), nobody's turn, nobody waiting
  for i = 1, n do
    if values[i] ~= token then
      redis.call('SET', KEYS[6 * i - 5], token, 'PX', ARGV[2])
    else
      redis.call('PEXPIRE', KEYS[6 * i - 5], ARGV[2])
    end
    reply[i + 1] = fencing and nextFence(KEYS[6 * i]) or 0
  end
  return reply
end

local R = queueRules()
local rules = {window = ARGV[9] + 0, ahead = ARGV[10] + 0, slack = ARGV[11] + 0, look = 4}

-- Which keys the caller may take: each free key with no live turn goes to
-- the first waiter in line that is sure to try soon (nextTurn, as in
-- obtain.lua), the caller's own entry counting as such.
local now
local ok, held = true, false
local qs, turned, blocked, past, extra = {}, {}, {}, {}, {}
for i = 1, n do
  local q = queue(i)
  qs[i], extra[i] = q, 0
  local v = values[i]
  if v and v ~= token then
    ok, held, blocked[i] = false, true, true
  elseif not v then
    local turn = R.turnOf(q)
    if turn == id then
      turned[i] = true
    elseif turn then
      ok, blocked[i], past[i] = false, true, true
    else
      local next, k, moved
      next, k, now, moved = R.nextTurn(q, now, rules, id)
      extra[i] = moved
      if next and next ~= id then
        R.grant(q, next, k)
        moved = moved + 1
        ok, blocked[i] = false, true
      end
      R.announce(channel(i), KEYS[6 * i - 5], moved)
    end
  end
end

if ok then
  for i = 1, n do
    local q = qs[i]
    if values[i] ~= token then
      redis.call('SET', KEYS[6 * i - 5], token, 'PX', ARGV[2])
    else
      redis.call('PEXPIRE', KEYS[6 * i - 5], ARGV[2])
    end
    if turned[i] then -- its turn, announced when it was given
      redis.call('DEL', q.turn)
      R.drop(q, id)
    elseif R.drop(q, id) then -- a queued waiter took a free key unannounced: those behind move up
      R.announce(channel(i), KEYS[6 * i - 5], 1)
    end
    reply[i + 1] = fencing and nextFence(KEYS[6 * i]) or 0
  end
  return reply
end

-- Not acquired.
now = now or clock()
local status, count = 2, 0
if held then
  status = 0
end
for i = 1, n do
  if blocked[i] then
    count = count + 1
  end
end
if mode == 0 or not now then
  -- Not queued: it sleeps until the first blocking key expires or turn
  -- ends, if sooner than its poll; the keys that holders kept from it are
  -- marked, for the release messages that wake it.
  local reply, sleep = {status, 0, -1, count}, math.max(1, idle - spread)
  for i = 1, n do
    reply[4 + i] = 0
    if blocked[i] then
      local pttl, turnLeft = -2, nil
      if values[i] then
        pttl, reply[4 + i] = redis.call('PTTL', KEYS[6 * i - 5]), 1
      else
        turnLeft = math.max(redis.call('PTTL', qs[i].turn), 0)
      end
      sleep = math.min(sleep, R.pause(pttl, 1, turnLeft, idle, spread))
    end
  end
  reply[2] = sleep
  return reply
end
local sleep, after = idle, nil
local kinds, afters = {}, {}
if longest > 0 and longest <= n and not blocked[longest] then
  gather = true -- the key that kept it out longest is free for it: it gathers the others
end
for i = 1, n do
  local q = qs[i]
  local kind = 'p'
  if mode == 2 and (gather or blocked[i]) then
    kind = 'l'
    R.qcall('ZREM', q.polls, id) -- a listener now (it may have been in line not due)
  end
  kinds[i] = kind
  if ARGV[14] and ARGV[14] ~= '' and not R.qcall('ZSCORE', q.order, id) then
    -- Back in a line that dropped it (a turn it did not take in time):
    -- it keeps the place it first took.
    R.qcall('ZADD', q.order, ARGV[14], id)
  end
  local ahead = R.enqueue(q, id, kind, now)
  if blocked[i] then
    local pttl, turnLeft = -2, nil
    if values[i] then
      pttl = redis.call('PTTL', KEYS[6 * i - 5])
    else
      turnLeft = math.max(redis.call('PTTL', q.turn), 0)
    end
    sleep = math.min(sleep, R.pause(pttl, ahead, turnLeft, idle, spread))
    if past[i] then
      ahead = ahead - 1 -- the message of that turn is past
    end
    local a = math.max(ahead, 0) + 1 + extra[i]
    if not after or a < after then
      after = a
    end
    afters[i] = a
  end
end
-- soonest: the longest sleep after which a poller is due soon enough for
-- a turn (R.soon) from the moment it is described, its round trip
-- (ARGV[12]) included.
local soonest = math.max(1, R.soon(idle, rules) - ARGV[12])
if gather then
  -- A gathering caller tries again within a turn (multiacquire.go): a
  -- poller so due is given the turns of the keys as they free.
  sleep = math.min(sleep, rules.window, soonest)
elseif mode == 1 then
  -- A poller in line tries again soon enough to be given the turn of a
  -- key it waits for when the key frees (nextTurn passes over a poller
  -- not due that soon): a key that a holder takes again at once would
  -- otherwise never be free when it polls.
  sleep = math.min(sleep, soonest)
end
local due = now + sleep + ARGV[12] -- when its next try reaches the server
for i = 1, n do
  local q = qs[i]
  if not gather and not blocked[i] then
    -- Not gathering: in line for this key, but not due, so that its turn
    -- passes on (nextTurn passes over a poller not due) until it gathers.
    R.describe(q, id, 'p', now, now + idle + rules.ahead, now + 2 * idle + rules.ahead)
    if turned[i] then -- a turn it was given: the next in line gets it
      redis.call('DEL', q.turn)
      local next, k, _, moved = R.nextTurn(q, now, rules)
      if next then
        R.grant(q, next, k)
        moved = moved + 1
      end
      R.announce(channel(i), KEYS[6 * i - 5], moved)
    end
  else
    R.describe(q, id, kinds[i], now, due, due + idle)
  end
end
local reply = {status, sleep, after or -1, count}
for i = 1, n do
  reply[4 + i] = afters[i] or 0
end
reply[5 + n] = R.qcall('ZSCORE', qs[1].order, id) or '' -- its place in line, for the next attempts
reply[6 + n] = gather and 1 or 0
return reply
