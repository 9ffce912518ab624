-- semacquire: take a permit of a semaphore if one is free and the waiters
-- in line ahead of the caller do not need it; otherwise queue the caller
-- (unless it does not wait) and say how long it sleeps before it tries
-- again by itself. Runs after prelude.lua (permitRules).
--
-- KEYS     as obtain.lua, with the semaphore key (a sorted set: token ->
--          expiry, server ms) for the lock key: semaphore key, wait queue,
--          queue info, turn (unused), pollers, fence counter
-- ARGV[1]  token, unique to this acquisition, ending with '#' and the
--          caller's count of permits (ARGV[13])
-- ARGV[2]  time to live in ms
-- ARGV[3]  waiter id: registryId/n, one per semaphore instance (its
--          leases that wait take turns at talking to Redis)
-- ARGV[4]  how the caller waits if it fails: 0 it does not, 1 it polls
--          (SpinLock), 2 it is woken by the turn message (PubSubLock)
-- ARGV[5]  the caller's poll interval in ms
-- ARGV[6]  jitter in ms, taken off a full poll interval
-- ARGV[7]  1 to take a fencing token, 0 not to
-- ARGV[8]  turn prefix (registryKey-turn:): a listener whose turn comes
--          is told on ARGV[8] .. its registry id .. ':' .. KEYS[1] (tell)
-- ARGV[9]  a listening waiter's turn, in ms
-- ARGV[10] how soon (ms) a polling waiter must be due to get a turn
-- ARGV[11] ms added to a polling waiter's turn
-- ARGV[12] the caller's round trip in ms
-- ARGV[13] permits: the caller admits itself only while fewer than this
--          many permits are held. Every permit's token carries its
--          holder's count: when it compares (ARGV[16]) a caller whose
--          count differs from the soonest live permit's is refused (a
--          token without one is not compared)
-- ARGV[14] 1 when more leases of the caller's registry wait behind it:
--          granted the last free permit, its instance queues again
-- ARGV[15] 1 when the caller's entry is in line, as far as it knows: the
--          queue is then not tested for being empty (admit finds the
--          caller's rank, and an entry that is gone costs a call more)
-- ARGV[16] 1 when the caller compares its count of permits (ARGV[13])
--          with the holders' (a Semaphore's first attempt, then at most
--          once a second: semstate.go, compareEvery), 0 not to (one call
--          less)
-- ARGV[17] 1 when the caller expects a free semaphore with nobody in
--          line (its instance is quiet: semlease.go, core.Crowd): unless
--          it is in line, one EXISTS of the semaphore key and the queue
--          comes first, and when neither exists it is the only read
-- ARGV[18] a grant record ('' for none): a listener (ARGV[4] 2) that is
--          refused and queued, or queued again (ARGV[14]), records it in
--          its entry (field waiter id .. '|' of the queue info), so that the
--          script that gives it its turn may give it a permit instead
--          (prelude.lua, deliver: a grant): 'PREFIX COUNT TTL SEQ MORE IDLE
--          FENCED', the permit's token PREFIX SEQ COUNT (the caller's own
--          token is that of its SEQ), for TTL ms, with a fencing token if
--          FENCED is 1; MORE leases of the caller's registry wait behind
--          it, each granted in turn (SEQ + 1, ...), the entry due IDLE ms
--          after each. A later record replaces it (not an earlier one of
--          the same registry: a resend); leaving the line drops it.
-- ARGV[19] a claim ('' for none): the token of a permit granted to the
--          caller's registry (ARGV[18]) whose grant message it may have
--          missed; if that permit is held and live, it is the caller's:
--          {6, fence}, its expiry reset to ARGV[2] from now unless later.
--
-- Reply: {1, fence} acquired (fence: a new fencing token, 0 without
--        fencing); the caller leaves the queue. {6, fence}: acquired
--        with the claim (ARGV[19]). 1: acquired on the
--        uncontended path (no fence, nobody in line). {1, fence, sleep, after}
--        the same, and the caller's instance is queued again (ARGV[14]):
--        sleep and after are for its next lease, as below. The same when
--        the permit is already ARGV[1]'s (a resend after a lost reply),
--        with a new fencing token.
--        {0, sleep, after} every permit is held; {2, sleep, after} one is
--        free, but waiters ahead of the caller are in line for it. sleep:
--        how long the caller sleeps before it tries by itself (0 for one
--        that does not wait); after: 1, the message of its own turn wakes
--        it (-1 when not queued).
--
-- The uncontended path runs EXISTS (of both keys, ARGV[17]; else ZCARD
-- and EXISTS of the queue), TIME, ZADD and PEXPIRE: expired permits are
-- pruned only when they would refuse the caller, and a refusal counts the
-- live ones (ZCOUNT) before it prunes any. A caller that compares counts
-- and finds permits held reads the soonest live one's (ZRANGE BYSCORE). A caller in line runs no EXISTS:
-- ZRANK says where it stands. A caller about to be refused looks for its
-- own token first (ZSCORE), so that a resend never leaves the first run's
-- permit held by no one, whether or not a permit is free. When every
-- permit is taken and they are 8 or fewer, a waiter's attempt reads them
-- with their expiries in one ZRANGE, which stands for that ZCOUNT, that
-- ZSCORE, the soonest's reads and the ZRANGE of a refusal's sleep (small,
-- below).
-- Error: 'ERR lockyard permits N' when the soonest live permit was taken
--        with a count N other than ARGV[13] (unless the caller's token
--        holds a permit already: a resend): nothing changes.
--        WRONGTYPE when KEYS[1] is not a sorted set (a lock's key: "WRONGTYPE
--        semaphore key holds a TYPE", where TYPE may be read); an
--        error when the script may not call TIME (see docs/SECURITY.md).
local token, id = ARGV[1], ARGV[3]
local grantRecord = ARGV[18] or '' -- a caller before grants sends none

-- fresh returns grant record rec to write in the caller's entry, unless the
-- entry holds a later one of the same registry (a resent attempt's: its
-- first run's grants moved it on, and going back would grant a number
-- twice); then nil. A registry numbers its grants in increasing order.
local function fresh(rec)
  local pre, seq = string.match(rec, '^(%S+) %S+ %d+ (%d+) ')
  local had = pre and redis.pcall('HGET', KEYS[3], id .. '|') -- another type: describe's HSET resets it
  if type(had) == 'string' then
    local hpre, hseq = string.match(had, '^(%S+) %S+ %d+ (%d+) ')
    if hpre == pre and hseq + 0 > seq + 0 then
      return nil
    end
  end
  return rec
end
-- found: how many of the semaphore key and its queue exist (nil: not
-- asked, or EXISTS refused), asked first by a caller that expects a free
-- semaphore (ARGV[17]): when neither does, that one call stands for ZCARD
-- and the queue's EXISTS.
local found, held = nil, 0
if ARGV[17] == '1' and ARGV[15] ~= '1' then
  found = redis.pcall('EXISTS', KEYS[1], KEYS[2])
  if type(found) ~= 'number' then
    found = nil
  elseif found == 0 and ARGV[7] ~= '1' and ARGV[14] ~= '1' then
    -- Free, nobody in line, no fencing token to take, nobody of the
    -- caller's behind it: the permit is the caller's before any rule is
    -- defined (each is a closure made at every run, the rules' tables
    -- too: most of an uncontended run's work). As permitRules' hold.
    local now = clock()
    if now then
      local ttl = ARGV[2] + 0
      redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), token)
      redis.call('PEXPIRE', KEYS[1], ttl)
      return 1
    end
  end
end
if found ~= 0 then
  held = redis.pcall('ZCARD', KEYS[1])
  if type(held) ~= 'number' then
    local t = redis.pcall('TYPE', KEYS[1]) -- for the error's words: lockyard's other kinds are named by their types
    return redis.error_reply('WRONGTYPE semaphore key holds a ' .. (t.ok or 'value that is not a sorted set'))
  end
end
local claim = ARGV[19] or ''
if claim ~= '' and held > 0 then
  -- The permit of a grant whose message the caller did not get (prelude.lua,
  -- deliver): the caller's since, live. Its time to live starts now, as the
  -- caller counts it, unless it lasts longer already (its grant's message
  -- may have come meanwhile, and its permit be in use): {6, fence}.
  local score = redis.call('ZSCORE', KEYS[1], claim)
  local now = score and clock()
  if now and score + 0 > now then
    local ttl = ARGV[2] + 0
    redis.call('ZADD', KEYS[1], 'XX', 'GT', string.format('%d', now + ttl), claim)
    if redis.call('PTTL', KEYS[1]) < ttl then
      redis.call('PEXPIRE', KEYS[1], ttl)
    end
    local fence = 0
    if ARGV[7] == '1' then
      local _, _, _, permitRules = shared()
      fence = permitRules().fenced(KEYS[6], ttl)
    end
    return {6, fence}
  end
end
if ARGV[4] == '0' and ARGV[16] ~= '1' and held >= ARGV[13] + 0 then
  -- A caller that does not wait (TryAcquire) and every permit held: it is
  -- refused before any rule is defined, unless fewer than that are live
  -- (the full path prunes the expired ones and counts them free) or one is
  -- the caller's own (a resend after a lost reply). A TryAcquire that a busy
  -- semaphore keeps refusing costs the server about two thirds of the full
  -- path's work.
  local now = clock()
  if now and redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now), '+inf') >= ARGV[13] + 0 and not redis.call('ZSCORE', KEYS[1], token) then
    return {0, 0, -1}
  end
end
local now = clock()
if not now then
  return redis.error_reply('ERR lockyard: a semaphore needs the TIME command')
end
local permits, ttl = ARGV[13] + 0, ARGV[2] + 0
local pruned = held >= permits
-- small: every permit of a semaphore whose permits are all taken (live or
-- not), when they are 8 or fewer, with its expiry, in order of expiry
-- (ZRANGE WITHSCORES): one call answers what a waiter's attempt that is
-- likely refused asks of them, each a call of its own otherwise, and no
-- rule of the permits is defined for them (the rules' closures cost more
-- than the calls): how many are live (ZCOUNT), the soonest live one's
-- expiry (ZRANGE, the refusal's sleep) and count (ZRANGE BYSCORE), and
-- whether the caller's token is among them (ZSCORE: a resend). live: how
-- many are; soonestAt: the index in small of the soonest live permit; mine:
-- whether one of them is the caller's. (A TryAcquire refused above asks two
-- of these, by ZCOUNT and ZSCORE: cheaper than the scores' reply.)
local small, live, soonestAt, mine = nil, 0, nil, false
if pruned and held <= 8 then -- expired permits matter only when they would refuse the caller
  small = redis.call('ZRANGE', KEYS[1], '0', '-1', 'WITHSCORES')
  local from = math.floor(now) -- as ZCOUNT's '(' .. ms(now), for a score that is not whole
  for i = 1, #small, 2 do
    if small[i + 1] + 0 > from then
      live, soonestAt = live + 1, soonestAt or i
      mine = mine or small[i] == token
    end
  end
end
-- noteWait records how the caller, in line as a waiter of kind, waits
-- after a refusal of a lean path below (describe's calls): due to try at
-- due, its entry lapsing at lapse, a listener's grant record written
-- unless the entry holds a later one (fresh; added: the entry is new in
-- line, and has none); and keeps the queue keys alive until lapse. False,
-- with nothing written, when the info key holds another type: the general
-- path then decides.
local function noteWait(kind, now, due, lapse, added)
  local v, n = kind .. ' ' .. string.format('%d', due) .. ' ' .. string.format('%d', lapse), nil
  local rec = nil
  if kind == 'l' and grantRecord ~= '' then
    rec = added and grantRecord or fresh(grantRecord)
  end
  if rec then
    n = redis.pcall('HSET', KEYS[3], id, v, id .. '|', rec)
  else
    n = redis.pcall('HSET', KEYS[3], id, v)
  end
  if type(n) ~= 'number' then
    return false
  end
  keepAlive({KEYS[2], KEYS[3], kind == 'p' and KEYS[5] or nil}, now, lapse)
  return true
end
-- The lean refusal: a waiter's attempt on a semaphore whose permits (8 or
-- fewer: small) are all taken and live, none of them the caller's, that
-- does not compare counts, queues the caller (or keeps its place) and says
-- how long it sleeps, in the calls that the general path below makes in
-- that case (enqueue, pause, describe in prelude.lua), without defining a
-- rule: the rules' closures and tables are most of the work of a refusal
-- on a busy semaphore. It ends where a queue key holds another type before it
-- has written anything that the general path would not write the same;
-- the general path then takes over. lean_test.go runs both paths on random
-- states and requires the same replies, keys and messages.
repeat -- lean refusal
  if not soonestAt or live < held or live < permits or mine or ARGV[16] == '1' then
    break
  end
  local mode = ARGV[4] + 0
  if mode == 0 then
    break
  end
  local kind, order, info, polls = 'p', KEYS[2], KEYS[3], KEYS[5]
  if mode == 2 then
    kind = 'l'
  end
  local f = string.format
  local since, added = f('%.3f', now), false
  if ARGV[15] ~= '1' then -- enqueue, new: ZADD NX first
    local n = redis.pcall('ZADD', order, 'NX', since, id)
    if type(n) ~= 'number' then
      break
    end
    added = n == 1
    if not added and kind == 'p' then
      since = redis.call('ZSCORE', order, id)
    end
  else
    local s = redis.pcall('ZSCORE', order, id)
    if type(s) == 'table' then
      break
    elseif s then
      since = s
    else
      redis.call('ZADD', order, since, id)
      added = true
    end
  end
  if kind == 'p' and type(redis.pcall('ZADD', polls, 'NX', since, id)) ~= 'number' then
    break
  end
  local idle = ARGV[5] + 0
  local sleep = pause(math.max(math.floor(small[soonestAt + 1] - now), 0), 0, nil, idle, ARGV[6] + 0)
  local due = now + sleep + ARGV[12]
  if not noteWait(kind, now, due, due + idle, added) then
    break
  end
  do
    return {0, sleep, 1}
  end
until true
-- The lean wait: a waiter in line, that does not compare counts, on a
-- semaphore with permits free (fewer held than permits, live or not)
-- whose turns are the waiters' ahead of it: as many of those in front of
-- it as are free are sure to try soon (admit: a listener, or a poller due
-- soon) and were given their turns already, and none of the entries read
-- on the way is to be dropped. It is refused ({2, sleep, 1}) and keeps its
-- place, in the calls that admit, enqueue, pause and describe make in that
-- case, but the second ZRANK, without defining a rule. Any other case
-- (a turn to give or an entry to drop on the way, a permit expired, the
-- caller's own permit: a resend) is left to the general path before
-- anything is written; lean_test.go compares the two on random states.
local known = nil -- the caller's place in line, as the lean wait read it (false: not in line), for admit
repeat -- lean wait
  local mode = ARGV[4] + 0
  if pruned or mode == 0 or ARGV[15] ~= '1' or ARGV[16] == '1' then
    break
  end
  local order, info, polls = KEYS[2], KEYS[3], KEYS[5]
  local free = permits - held
  local rank = redis.pcall('ZRANK', order, id)
  if type(rank) ~= 'table' then
    known = rank
  end
  if type(rank) ~= 'number' or rank < free then -- not in line, a key of another type, or admitted
    break
  end
  local ids = redis.call('ZRANGE', order, '0', string.format('%d', math.min(rank, 8) - 1))
  local window, most, slack, ahead = ARGV[9] + 0, ARGV[10] + 0, ARGV[11] + 0, 0
  for _, w in ipairs(ids) do
    local kind, _, _, ended, sure = liveEntry(info, w, now, window, most, slack)
    if not kind then -- unreadable, or to be dropped (gone)
      break
    end
    if sure then -- turnFor
      if ended == 0 then -- a turn to give
        break
      end
      ahead = ahead + 1
      if ahead >= free then
        break
      end
    end
  end
  if ahead < free then
    break
  end
  -- admit refused it; expired permits would be pruned and counted free,
  -- and a permit of the caller's token is a resend's.
  if held > 0 and (redis.call('ZCOUNT', KEYS[1], '-inf', string.format('%d', now)) > 0 or redis.call('ZSCORE', KEYS[1], token)) then
    break
  end
  local since = redis.call('ZSCORE', order, id)
  local kind = 'p'
  if mode == 2 then
    kind = 'l'
    local behind = redis.pcall('ZCOUNT', polls, '-inf', since) -- the pollers ahead, which a listener does not count
    if type(behind) ~= 'number' then
      break
    end
    rank = math.max(0, rank - behind)
  elseif type(redis.pcall('ZADD', polls, 'NX', since, id)) ~= 'number' then
    break
  end
  local idle = ARGV[5] + 0
  local sleep = pause(-2, rank, window, idle, ARGV[6] + 0)
  local due = now + sleep + ARGV[12]
  if not noteWait(kind, now, due, due + idle, false) then
    break
  end
  do
    return {2, sleep, 1}
  end
until true
-- nobodyWaits reports whether the wait queue is empty: from found, where
-- the semaphore key exists exactly when it holds permits (an empty sorted
-- set does not), or by queueEmpty.
local inKey = held
local function nobodyWaits()
  if found then
    return found - math.min(inKey, 1) == 0
  end
  return queueEmpty(KEYS[2])
end
local _, nextFence, queueRules, permitRules = shared()
local fenceKey = nil
if ARGV[7] == '1' then
  fenceKey = KEYS[6]
end
-- P: the permits' rules (permitRules), defined where first needed: a
-- refusal of a full semaphore of few permits (small) needs none, and each
-- rule is a closure made at every run.
local P = nil
if small then
  if live < held then
    P = permitRules()
    P.prune(KEYS[1], now)
  end
  held = live
elseif pruned then
  P = permitRules()
  held = P.held(KEYS[1], now, held)
end
-- count returns the count of permits that the soonest live permit was
-- taken with (the end of its token: '#' and the count), or nil if it has
-- none (a permit of a lockyard that did not write it), or none is live.
local function count()
  local first
  if small then
    first = soonestAt and small[soonestAt]
  else
    first = redis.call('ZRANGE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'BYSCORE', 'LIMIT', 0, 1)[1]
  end
  return first and string.match(first, '#([1-9]%d*)$')
end
if held > 0 and ARGV[16] == '1' then
  local n = count()
  if n and n ~= ARGV[13] then
    if redis.call('ZSCORE', KEYS[1], token) then
      -- A resend after a lost reply, whose first run took a permit (the
      -- counts were mixed by permits without one): it is the caller's.
      P = P or permitRules()
      return {1, fenceKey and P.fenced(fenceKey, ttl) or 0}
    end
    return redis.error_reply('ERR lockyard permits ' .. n)
  end
end
local free = permits - held
local mode, idle, spread = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
local kind = 'p'
if mode == 2 then
  kind = 'l'
end
local R = nil
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
local rules = {window = ARGV[9] + 0, ahead = ARGV[10] + 0, slack = ARGV[11] + 0}

-- granted gives the caller the permit and tells the listeners in told
-- (nil: none) that their turn has come. With ARGV[14] set and no other
-- permit free, the caller's instance queues again, behind everyone, for its
-- registry's leases that wait: {1, fence, sleep, 1}, sleep as for a failed
-- attempt.
local function granted(told)
  P = P or permitRules()
  local fence = P.hold(KEYS[1], token, now, ttl, fenceKey, held)
  if ARGV[14] == '1' and free <= 1 then
    R = R or queueRules()
    P.toBack(R, q, id, kind, now)
    local sleep = R.pause(P.soonest(KEYS[1], now), 0, nil, idle, spread)
    local due = now + sleep + ARGV[12]
    local record = nil
    if mode == 2 then
      -- Its next leases are granted the permits: the one that took this
      -- permit is not among them.
      local pre, count, t, seq, more, every, fenced = string.match(grantRecord, '^(%S+) (%S+) (%d+) (%d+) (%d+) (%d+) ([01])$')
      if pre and more + 0 > 0 then
        local f = string.format
        record = fresh(table.concat({pre, count, t, f('%d', seq + 1), f('%d', more - 1), every, fenced}, ' '))
      end
    end
    R.describe(q, id, kind, now, due, due + idle, record)
    if told then
      P.deliver(R, q, KEYS[1], told, now, ARGV[8], KEYS[6], '#' .. ARGV[13])
    end
    return {1, fence, sleep, 1}
  end
  if told then -- the next lease tries at once
    P.deliver(R, q, KEYS[1], told, now, ARGV[8], KEYS[6], '#' .. ARGV[13])
  end
  return {1, fence}
end

if free > 0 and ARGV[15] ~= '1' and nobodyWaits() then -- free, nobody waiting
  return granted(nil)
end
local ok, told = false, nil
if free > 0 then
  R, P = queueRules(), P or permitRules()
  ok, told = P.admit(R, q, now, free, id, rules, known)
  if not ok and not pruned and held > 0 then
    -- The scripts that give permits back count the expired ones that
    -- nobody pruned yet as free (permitRules.live), and may have given the
    -- caller its turn on one: count them so too before refusing it.
    local expired = P.prune(KEYS[1], now)
    if expired > 0 then
      held, free = held - expired, free + expired
      local more
      ok, more = P.admit(R, q, now, free, id, rules)
      for _, x in ipairs(more) do
        told[#told + 1] = x
      end
    end
  end
end
if ok then
  if ARGV[14] ~= '1' or free > 1 then
    R.drop(q, id) -- granted queues it again otherwise
  end
  if free > 1 then
    -- Permits are free besides the caller's: admit stopped at the caller
    -- (first in line, or ahead of those told) and told nobody behind it.
    -- Their turns go to the first in line now.
    P.offer(R, q, KEYS[1], now, free - 1, ARGV[8], rules, KEYS[6], '#' .. ARGV[13])
  end
  return granted(told)
end
if told then
  P.deliver(R, q, KEYS[1], told, now, ARGV[8], KEYS[6], '#' .. ARGV[13])
end
-- A resend after a lost reply finds its first run's permit: small knows (the
-- permits of this run's start, pruned; those that deliver set since are
-- others').
local resent = mine
if not small then
  resent = held > 0 and redis.call('ZSCORE', KEYS[1], token)
end
if held > 0 and resent then
  -- A resend after a lost reply, whose first run took a permit: it is the
  -- caller's, with a new fencing token. (A resend that is granted anyway
  -- sets the same permit again.)
  P = P or permitRules()
  return {1, fenceKey and P.fenced(fenceKey, ttl) or 0}
end

-- Not acquired: every permit is held (0), or the free ones are others'
-- turns (2). A caller that does not wait is not told how long to sleep.
local status = 0
if free > 0 then
  status = 2
end
if mode == 0 then
  return {status, 0, -1}
end
local pttl, turnLeft = -2, rules.window
if status == 0 then
  turnLeft = nil
  if not small then
    P = P or permitRules()
    pttl = P.soonest(KEYS[1], now)
  elseif soonestAt then -- nothing was set since small was read: nobody was admitted
    pttl = math.max(math.floor(small[soonestAt + 1] - now), 0)
  end
end
R = R or queueRules()
-- The rank matters to a waiter next to a turn only (pause). A caller that
-- knows of no entry of its own is most often new in line: added first.
local ahead, added = R.enqueue(q, id, kind, now, turnLeft == nil, ARGV[15] ~= '1')
local sleep = R.pause(pttl, ahead, turnLeft, idle, spread)
local due = now + sleep + ARGV[12]
local record = nil
if mode == 2 and grantRecord ~= '' then
  record = grantRecord
  if not added then -- an entry new in line has no record to keep (enqueue)
    record = fresh(grantRecord)
  end
end
R.describe(q, id, kind, now, due, due + idle, record)
return {status, sleep, 1}
