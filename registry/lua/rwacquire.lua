-- rwacquire: take a read-write lock's read side or write side for a
-- holder, or queue the caller's instance in the key's wait queue and say
-- how long it sleeps. Runs after prelude.lua and rwrules.lua.
--
-- KEYS[1]  read-write lock key (a hash, see rwrules.lua)
-- KEYS[2]  wait queue (sorted set: waiter id -> when it began to wait)
-- KEYS[3]  queue info (hash: waiter id -> how it waits)
-- KEYS[4]  turn (unused: turns are told, as a semaphore's)
-- KEYS[5]  pollers (sorted set, as KEYS[2])
-- KEYS[6]  fence counter
-- KEYS[7]  readers (sorted set: token -> expiry, server ms)
-- ARGV[1]  token of the new hold
-- ARGV[2]  time to live in ms
-- ARGV[3]  waiter id of the caller's instance, ending in '/r' or '/w'
-- ARGV[4]  0: never queued (TryAcquire, or a registry's readers asking
--          to share their hold again); 1: queued as a poller; 2: queued
--          as a listener (told its turn on its registry's turn channel)
-- ARGV[5]  poll interval in ms
-- ARGV[6]  jitter in ms, subtracted from a sleep of a whole poll interval
-- ARGV[7]  1 to take a fencing token, 0 not to
-- ARGV[8]  turn prefix: a listener is told its turn on the channel
--          prefix .. its registry id .. ':' .. KEYS[1]
-- ARGV[9]  a listening waiter's turn, in ms
-- ARGV[10] how soon (ms) a polling waiter must be due to get a turn
-- ARGV[11] ms added to a polling waiter's turn
-- ARGV[12] the caller's round trip in ms
-- ARGV[13] the side: 'r' (read) or 'w' (write)
-- ARGV[14] 1 when the caller's entry is in line, as far as it knows: the
--          queue is then not tested for being empty
-- ARGV[15] a grant record ('' for none): a listener (ARGV[4] 2) that is
--          refused and queued records it in its entry (field waiter id ..
--          '|' of the queue info), so that the script that gives it its
--          turn may give it the key instead (rwrules.lua, deliver: a
--          grant): 'PREFIX SEQ TTL FENCED ATTEMPT', the hold's token
--          PREFIX SEQ, which is the caller's token (ARGV[1]) too, for TTL
--          ms, with a fencing token if FENCED is 1; ATTEMPT numbers the
--          caller's attempts that record it. A record never replaces one of
--          a later SEQ of the same PREFIX (a resent attempt's).
-- ARGV[16] 1 when the token is the caller's entry's grant token (with a
--          record, or without: a waiter that no longer asks for grants,
--          whose last record is then deleted): if it holds the key
--          already (a grant whose message the caller did not get, or a
--          resend after a lost reply), the caller gets that hold, before
--          any rule: its expiry reset to ARGV[2] from now unless later,
--          its entry out of line, {1, fence} for a writer and {1, fence,
--          1} for a reader (a writer may wait behind it).
--
-- Reply: {1, fence} acquired (fence: a new fencing token, 0 without
--        fencing); the caller's entry leaves the line. {1, fence, 1}: a
--        reader acquired with a writer left in line behind its entry (among
--        the 16 after it): its registry's readers that come later do not
--        share its hold. 1: acquired on the
--        uncontended path (nobody held or waited; no fencing). A reader's token
--        that holds already (a registry's shared hold) keeps the later
--        of its expiries.
--        {0, sleep, after}: the other side holds the key (or the writer,
--        for a writer); {2, sleep, after}: the key could be the caller's,
--        but waiters ahead of it come first. sleep: how long the caller
--        sleeps before it tries by itself; after: 1, the message of its
--        own turn wakes it (-1 when not queued).
--
-- A writer that queues while readers hold the key tells their registries
-- (rwrules.lua, yield), once, when its entry is new.
-- Error: WRONGTYPE when KEYS[1] is not a hash ("WRONGTYPE rwlock key holds
--        a TYPE", where TYPE may be read); an error when the script may
--        not call TIME (see docs/SECURITY.md).
local token, id, side = ARGV[1], ARGV[3], ARGV[13]
local v = redis.pcall('HMGET', KEYS[1], 'w', 'r')
if v.err then
  local t = redis.pcall('TYPE', KEYS[1]) -- for the error's words: lockyard's other kinds are named by their types
  return redis.error_reply('WRONGTYPE rwlock key holds a ' .. (t.ok or 'value that is not a hash'))
end
local record, claim = ARGV[15] or '', ARGV[16] == '1' -- a caller before grants sends neither
if claim and (v[1] == token or (side == 'r' and v[2] and not v[1])) then
  -- A grant's hold, or one taken by this token's first run: the caller's.
  local ttl, now, mine = ARGV[2] + 0, nil, v[1] == token
  if not mine then
    local score = redis.call('ZSCORE', KEYS[7], token)
    now = score and clock()
    mine = now and score + 0 > now
  end
  if mine then
    local _, _, queueRules, permitRules = shared()
    if side == 'w' then
      if redis.call('PTTL', KEYS[1]) < ttl then
        redis.call('PEXPIRE', KEYS[1], ttl)
      end
    else
      redis.call('ZADD', KEYS[7], 'GT', string.format('%d', now + ttl), token)
      if redis.call('PTTL', KEYS[1]) < ttl then
        redis.call('PEXPIRE', KEYS[1], ttl)
        redis.call('PEXPIRE', KEYS[7], ttl)
      end
    end
    queueRules().drop({order = KEYS[2], info = KEYS[3], polls = KEYS[5]}, id)
    local fence = 0
    if ARGV[7] == '1' then
      fence = permitRules().fenced(KEYS[6], ttl)
    end
    if side == 'w' then
      return {1, fence}
    end
    return {1, fence, 1}
  end
end
if not v[1] and not v[2] and ARGV[14] ~= '1' and ARGV[7] ~= '1' and queueEmpty(KEYS[2]) then
  -- Nobody holds the key or waits, and no fencing token to take: the
  -- caller's, before any rule is defined (each is a closure made at every
  -- run, the rules' tables too: most of an uncontended run's work). As
  -- rwRules' take, for a key that is new: no PTTL to read.
  local now = clock()
  if now then
    local ttl = ARGV[2] + 0
    if side == 'w' then
      redis.call('HSET', KEYS[1], 'w', token)
      redis.call('PEXPIRE', KEYS[1], ttl)
      return 1
    end
    redis.call('ZADD', KEYS[7], 'GT', string.format('%d', now + ttl), token)
    redis.call('HSET', KEYS[1], 'r', '1')
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[7], ttl)
    return 1
  end
end
if v[1] and v[1] ~= token and ARGV[4] == '0' then
  -- A writer holds the key, and the caller does not wait (TryAcquireRead,
  -- TryAcquireWrite): refused before any rule is defined, as obtain.lua
  -- refuses a TryLock, with the full path's sleep for a caller not in line
  -- (until the writer's expiry, if sooner than a poll).
  if clock() then
    return {0, pause(redis.call('PTTL', KEYS[1]), 2, nil, ARGV[5] + 0, ARGV[6] + 0), -1}
  end
end
local clock, _, queueRules, permitRules, tell = shared()
local now = clock()
if not now then
  return redis.error_reply('ERR lockyard: a read-write lock needs the TIME command')
end
local RW = rwRules()
local R = nil -- the wait queue's rules, defined once the line matters
local writer = v[1]
-- held counts the readers that hold the key (pruning the expired ones):
-- a writer needs it, a reader only when the line is not empty.
local held = nil
local function readers()
  if held == nil then
    held = writer and 0 or RW.readers(KEYS[1], KEYS[7], v[2], now)
  end
  return held
end
local fenceKey, P = nil, nil
if ARGV[7] == '1' then
  fenceKey, P = KEYS[6], permitRules()
end
local ttl, mode = ARGV[2] + 0, ARGV[4] + 0
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
local rules = {window = ARGV[9] + 0, ahead = ARGV[10] + 0, slack = ARGV[11] + 0}
local fits = not writer and (side == 'r' or readers() == 0)
local behindWriter = false
local writerBehind = nil -- whether a writer waits behind the caller's rank (writerFrom), once asked
if fits then
  local ok, told, rank = true, nil, nil
  if ARGV[14] == '1' or not queueEmpty(KEYS[2]) then
    R = queueRules()
    ok, told, behindWriter, rank = RW.walk(R, q, now, rules, id, side, writer, readers())
    if #told > 0 then
      -- The readers told are ahead of the caller: a writer behind it is
      -- behind them too. Asked before deliver takes those granted out of
      -- line, from the caller's rank as walk found it.
      if rank and side == 'r' then
        writerBehind = RW.writerFrom(R, q, rank)
      end
      -- A writer that queues (refused: the readers told are ahead of it)
      -- waits behind them too.
      RW.deliver(R, q, KEYS[1], KEYS[7], told, now, ARGV[8], KEYS[6], behindWriter or writerBehind or (side == 'w' and mode ~= 0), tell, permitRules)
    end
  end
  if ok then
    if R then
      R.drop(q, id)
    end
    -- 'r' is set still unless readers() found every reader expired.
    local fence = RW.take(KEYS[1], KEYS[7], side, token, now, ttl, fenceKey, P, v[2] and held ~= 0)
    if writerBehind == nil and side == 'r' and rank then
      writerBehind = RW.writerFrom(R, q, rank)
    end
    if writerBehind then
      return {1, fence, 1} -- a writer behind the caller: readers that come later queue behind it
    end
    return {1, fence}
  end
end

-- A waiter behind turns just given tries when they end; one behind a
-- writer that waits for readers, or behind the other side, when the first
-- holder's expiry comes or its poll (a release tells a listener sooner).
local status, pttl, turnLeft = 0, RW.soonest(KEYS[1], KEYS[7], writer, now), nil
if fits then
  status = 2
  if not behindWriter then
    pttl, turnLeft = -2, rules.window
  end
end
local idle, spread = ARGV[5] + 0, ARGV[6] + 0
R = R or queueRules()
if mode == 0 then
  return {status, R.pause(pttl, 2, turnLeft, idle, spread), -1}
end
local kind = 'p'
if mode == 2 then
  kind = 'l'
end
-- A caller that knows of no entry of its own is most often new in line:
-- added first (enqueue).
local ahead, added = R.enqueue(q, id, kind, now, false, ARGV[14] ~= '1')
local fresh = side == 'w' and added and readers() > 0
local sleep = R.pause(pttl, ahead, turnLeft, idle, spread)
local due = now + sleep + ARGV[12]
local grantRecord = nil
if mode == 2 and record ~= '' then
  grantRecord = record
  -- An entry new in line has no record to keep (enqueue).
  local had = not added and R.qcall('HGET', q.info, id .. '|')
  if type(had) == 'string' then
    -- A later number of the same registry's (this is a resent attempt's):
    -- kept, or its grant would give a number that the registry got already.
    local hpre, hseq = string.match(had, '^(%S+) (%d+) ')
    local pre, seq = string.match(record, '^(%S+) (%d+) ')
    if hpre and hpre == pre and seq and hseq + 0 > seq + 0 then
      grantRecord = nil
    end
  end
elseif claim then
  R.qcall('HDEL', q.info, id .. '|') -- no longer asking: no grant it would not hear
end
R.describe(q, id, kind, now, due, due + idle, grantRecord)
if fresh then
  RW.yield(ARGV[8], KEYS[1], KEYS[7])
end
return {status, sleep, 1}
