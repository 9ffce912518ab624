-- prelude: the rules that the lock scripts share, prepended to each script
-- that needs them (scripts.go). Nothing here reads KEYS or ARGV: every
-- function takes its keys and settings as arguments, so that the rules can
-- be run alone with a fixed clock (prelude_test.go). Lua makes a closure of
-- each function at every run of a script, so only queueEmpty, clock and
-- pause, which the fast paths need, are defined at once: shared defines the
-- other rules, when a script needs them (local clock, nextFence, queueRules,
-- permitRules, tell = shared()), and queueRules and permitRules define
-- theirs when called. An uncontended release, obtain or pass defines four
-- functions, not eight.
--
-- Numbers that come as strings (ARGV, TIME, scores, queue entries) are
-- read with s + 0 where the number is kept or compared, and used as they
-- come where arithmetic converts them: tonumber(s) converts twice (its
-- check, then its result), and the conversion (strtod) is a large part of
-- a short script's work.
--
-- The wait queue of a lock key is kept in four keys of its Cluster slot
-- (wire.Layout), named by a table q:
--   q.order  sorted set: waiter id -> server time (ms) at which it began
--            to wait. Oldest first: the order of turns.
--   q.polls  sorted set: the same, for the waiters that poll only: a
--            waiter that listens counts the listeners ahead of it.
--   q.info   hash: waiter id -> 'KIND DUE LAPSE [END]'. KIND is 'l' for a
--            waiter woken by a message (PubSubLock: a lock's release message,
--            a semaphore's turn message), 'p' for one
--            that polls (SpinLock); DUE is when it will next try by itself;
--            LAPSE is when its entry stops counting unless it tries again;
--            END, when the turn it was last given ended (until it tries).
--            A semaphore's listener has a second field, id .. '|': its
--            grant record (semacquire.lua's ARGV[18], deliver).
--   q.turn   string: the waiter that a free lock key is kept for, while
--            this key lives (a few ms; set by grant).
-- A waiter is one lock instance ('registryId/n'): the head of that
-- instance's local queue, the only goroutine of it that talks to Redis. A
-- queue key of another type, or an entry that cannot be read, is dropped:
-- the queue only orders waiters, and losing it loses nothing but order.

-- queueEmpty reports whether the wait queue whose order key is order has
-- no waiter (a key of another type counts as not empty: queueRules then
-- deals with it). EXISTS is the cheapest test (an empty sorted set does not
-- exist); an ACL without +exists (older docs left it out) makes it read
-- the first entry instead.
local function queueEmpty(order)
  local n = redis.pcall('EXISTS', order)
  if type(n) == 'number' then
    return n == 0
  end
  local r = redis.pcall('ZRANGE', order, '0', '0')
  return type(r) == 'table' and not r.err and #r == 0
end

-- clock returns the server's time in ms (with its microseconds as the
-- fraction, so that waiters who queue in one ms keep their order), or nil
-- if the script may not call TIME (an ACL without +time); the scripts then
-- keep no queue. It is defined at once, as queueEmpty is: the uncontended
-- paths of semacquire.lua and rwacquire.lua read the clock before any
-- other rule.
local function clock()
  local t = redis.pcall('TIME')
  if type(t) ~= 'table' or t.err then
    return nil
  end
  return t[1] * 1000 + t[2] / 1000
end

-- pause returns how long (ms) a waiter that failed to take the key sleeps
-- before it tries again by itself: a waiter at most second in line to a
-- turn until the turn ends (turnLeft: its ms left, or nil); else until the
-- holder's key expires (pttl: ms left, -1 without expiry, -2 none), if
-- sooner than its poll interval idle; else idle shortened by spread (a
-- jitter, so that the waiters of many processes do not poll in step). It is
-- defined at once: obtain.lua refuses a TryLock on a held key with it, before
-- any other rule.
local function pause(pttl, rank, turnLeft, idle, spread)
  if turnLeft and rank <= 1 then
    return turnLeft + 1
  end
  if pttl >= 0 and pttl < idle then
    return pttl + 1
  end
  return math.max(1, idle - spread)
end

-- keepAlive keeps each of the wait queue's keys alive until lapse (server
-- ms; a waiter's entry stops counting then), and up to twice as long from
-- now: they are extended in steps, not at every write (describe). Defined
-- at once, as pause: the lean paths of semacquire.lua and obtain.lua use it.
local function keepAlive(keys, now, lapse)
  for _, k in ipairs(keys) do
    local left = redis.call('PTTL', k)
    if left < 0 or left < lapse - now then
      redis.call('PEXPIRE', k, string.format('%d', 2 * (lapse - now)))
    end
  end
end

-- liveEntry returns waiter id's kind, due, lapse and the end of its last
-- turn (0: none), read from the queue's info key info as queueRules'
-- waiter reads them, and whether it is sure to try soon (as turnFor
-- decides: a listener, or a poller due within soon of its interval, most
-- and slack being r.ahead and r.slack), if it is live (not gone: queueRules'
-- gone, window the listeners' turn in ms); else nil (no entry, one that
-- cannot be read or is to be dropped, a key of another type: the rules then
-- decide). Defined at once, as pause: the lean paths read the line with it.
local function liveEntry(info, id, now, window, most, slack)
  local v = redis.pcall('HGET', info, id)
  local kind, due, lapse, ended = nil, nil, nil, nil
  if type(v) == 'string' then
    kind, due, lapse, ended = string.match(v, '^([lp]) (%d+) (%d+) ?(%d*)$')
  end
  if not kind then
    return nil
  end
  due, lapse, ended = due + 0, lapse + 0, ended ~= '' and ended + 0 or 0
  if lapse <= now or ended > 0 and ended + window < now then
    return nil
  end
  return kind, due, lapse, ended, kind == 'l' or due - now <= math.min(most + 0, math.max(slack + 1, (lapse - due) / 3))
end

-- firstLive returns the first waiter in the wait queue whose order and
-- info keys are order and info, and what liveEntry says of it, if it is
-- live; else nil (nobody in line, or liveEntry's nil). The lean turns of
-- release.lua and semrelease.lua read the line with it.
local function firstLive(order, info, now, window, most, slack)
  local first = redis.pcall('ZRANGE', order, '0', '0')
  local id = type(first) == 'table' and first[1]
  if type(id) ~= 'string' then
    return nil
  end
  local kind, due, lapse, ended, sure = liveEntry(info, id, now, window, most, slack)
  if not kind then
    return nil
  end
  return id, kind, due, lapse, ended, sure
end

-- shared defines, and returns, the rules that the fast paths do not need
-- (and clock, for the scripts' convenience): clock, nextFence, queueRules,
-- permitRules and tell.
local function shared()
  -- nextFence increments the fence counter key. A missing counter (a new
  -- key, or one Redis lost: a restart without persistence, a failover to a
  -- replica that lacked it, FLUSHALL) is first seeded with the server's clock
  -- in microseconds, so that tokens keep increasing across such a loss while
  -- the clock does not go back and the key sees fewer than a million
  -- acquisitions a second on average.
  local function nextFence(key)
    if not redis.call('GET', key) then
      local t = redis.call('TIME')
      redis.call('SET', key, t[1] .. string.format('%06d', t[2] + 0))
    end
    return redis.call('INCR', key)
  end

  -- tell publishes the turn message of the semaphore or read-write lock
  -- whose key is key to each waiter of ids (admit, walk), on its
  -- registry's turn channel: prefix, the registry id (the waiter id before
  -- its '/'), ':' and key (wire.Layout.TurnChannel). Only that registry
  -- hears it. A message the server refuses (an ACL without the turn
  -- channels) is a message lost: the waiter tries when its sleep ends. It
  -- is defined here, not in permitRules, so that a read-write lock's
  -- scripts tell without defining the permits' rules.
  local function tell(prefix, key, ids)
    for _, id in ipairs(ids) do
      local reg = string.match(id, '^([^/]+)/')
      if reg then
        redis.pcall('PUBLISH', prefix .. reg .. ':' .. key, key)
      end
    end
  end

  -- queueRules returns the wait queue's rules as a table of functions.
  local function queueRules()
    -- ms formats a time or duration in ms as an integer argument.
    local function ms(n)
      return string.format('%d', n)
    end

    -- qcall runs a command on a queue key. A WRONGTYPE reply (the key holds
    -- another type) deletes the key and gives nil; any other error (NOPERM,
    -- OOM) is raised, as redis.call would.
    local function qcall(cmd, key, ...)
      local r = redis.pcall(cmd, key, ...)
      if type(r) == 'table' and r.err then
        if string.sub(r.err, 1, 9) ~= 'WRONGTYPE' then
          return redis.call(cmd, key, ...) -- raises it
        end
        redis.call('DEL', key)
        return nil
      end
      return r
    end

    -- waiter returns the kind, due, lapse and the end of the last turn (0:
    -- none) of waiter id, or nil.
    local function waiter(q, id)
      local v = qcall('HGET', q.info, id)
      if type(v) ~= 'string' then
        return nil
      end
      local kind, due, lapse, ended = string.match(v, '^([lp]) (%d+) (%d+) ?(%d*)$')
      if not kind then
        return nil
      end
      return kind, due + 0, lapse + 0, ended ~= '' and ended + 0 or 0
    end

    -- drop takes waiter id out of the queue, and reports whether it was in it.
    local function drop(q, id)
      if qcall('ZREM', q.order, id) ~= 1 then
        return false
      end
      qcall('HDEL', q.info, id, id .. '|')
      qcall('ZREM', q.polls, id)
      return true
    end

    -- enqueue puts waiter id, which polls if kind is 'p', at the end of the
    -- queue unless it is in it already (it keeps its place), and returns how
    -- many waiters are ahead of it: all of them for a poller; for a listener,
    -- those that listen too (each turn is announced by a release message, and
    -- a listener counts the messages until its own; a poller ahead gets a turn
    -- only now and then, when it is due: counting it would make the listener
    -- miss its turn, not counting it only makes it try a turn early); with
    -- unranked set, 0 instead, and one or two calls fewer (a caller that
    -- has no use for its rank). The second result says whether this call
    -- put the entry in line (it was not in it): nothing of it is in q.info
    -- then, since drop deletes both of its fields, as long as the queue
    -- keys are lost only together (they expire together; an eviction or a
    -- key of another type may take q.order alone, and a grant record left
    -- behind is then not compared with the caller's). With new set (the
    -- caller expects not to be in line) the entry is added first (ZADD NX)
    -- and its place read only if it was in line after all and the place
    -- matters (a poller, or a caller that wants its rank): a call fewer for
    -- a new entry, and one more for such an entry in line.
    local function enqueue(q, id, kind, now, unranked, new)
      local since, added = nil, false
      if new then
        since = string.format('%.3f', now)
        local n = qcall('ZADD', q.order, 'NX', since, id)
        if n == nil then -- another type, deleted by qcall
          n = qcall('ZADD', q.order, 'NX', since, id)
        end
        added = n == 1
        if not added and (kind == 'p' or not unranked) then
          since = qcall('ZSCORE', q.order, id) -- its own place's
        end
      else
        since = qcall('ZSCORE', q.order, id)
        if not since then
          since, added = string.format('%.3f', now), true
          qcall('ZADD', q.order, since, id)
        end
      end
      if kind == 'p' then -- NX: a listener that became a poller (an evicted instance) is counted as one from now on
        qcall('ZADD', q.polls, 'NX', since, id)
      end
      if unranked then
        return 0, added
      end
      local rank = qcall('ZRANK', q.order, id) or 0
      if kind == 'p' then
        return rank, added
      end
      return math.max(0, rank - (qcall('ZCOUNT', q.polls, '-inf', since) or 0)), added
    end

    -- describe records how waiter id waits, and keeps the keys it wrote alive
    -- until its entry lapses: each key lives up to twice as long as the last
    -- entry (they are extended in steps, not on every write), and none is left
    -- without a time to live.
    local function describe(q, id, kind, now, due, lapse, grant)
      local v = kind .. ' ' .. ms(due) .. ' ' .. ms(lapse)
      for _ = 1, 2 do -- twice if q.info held another type (qcall deleted it)
        local n
        if grant then
          n = qcall('HSET', q.info, id, v, id .. '|', grant)
        else
          n = qcall('HSET', q.info, id, v)
        end
        if n then
          break
        end
      end
      keepAlive({q.order, q.info, kind == 'p' and q.polls or nil}, now, lapse)
    end

    -- gone reports whether a queue entry read by waiter (kind nil: unreadable)
    -- is to be dropped: it lapsed, or the turn it was given ended more than
    -- r.window ago without its trying since.
    local function gone(kind, lapse, ended, now, r)
      return not kind or lapse <= now or (ended > 0 and ended + r.window < now)
    end

    -- soon returns how soon (ms) a poller whose poll interval is idle must
    -- be due to be given a turn: a third of its interval, within which
    -- another poller would most often come, so that a free key does not
    -- idle long for it; at least the slack and a ms (a poller of a ms or
    -- two, whose next try is due within its interval and a round trip, is
    -- never passed over for the listeners behind it), at most r.ahead.
    local function soon(idle, r)
      return math.min(r.ahead, math.max(r.slack + 1, idle / 3))
    end

    -- turnFor returns how long (ms) a turn given now to a live waiter of
    -- kind, due to try at due, lasts; nil if it is not sure to try soon (a
    -- poller due later than soon of its poll interval, lapse - due
    -- (describe), is passed over, and keeps its place). A turn not yet
    -- given (ended 0) is marked to end then, until the waiter tries again;
    -- the second result says whether it was. With delivers set (the
    -- caller passes the listeners it gives turns to to deliver, which may
    -- grant one the key instead and take its entry out of line), a
    -- listener's mark is kept in deferred until settle writes it, for a
    -- listener not granted: a grant needs none. A listener kept there
    -- counts as marked already when met again in the same run.
    local deferred = {}
    local function turnFor(q, id, kind, due, lapse, ended, now, r, delivers)
      local n = nil
      if kind == 'l' then
        n = r.window
      elseif due - now <= soon(lapse - due, r) then
        n = math.max(due - now, 0) + r.slack
      end
      if n and ended == 0 then
        if delivers and kind == 'l' then
          if deferred[id] then
            return n, false
          end
          deferred[id] = {due, lapse, now + n}
          return n, true
        end
        qcall('HSET', q.info, id, kind .. ' ' .. ms(due) .. ' ' .. ms(lapse) .. ' ' .. ms(now + n))
        return n, true
      end
      return n, false
    end

    -- settle ends the turn that turnFor kept in deferred for listener id:
    -- written if it was not granted the key (its entry is in line, told its
    -- turn), forgotten if it was.
    local function settle(q, id, granted)
      local d = deferred[id]
      if not d then
        return
      end
      deferred[id] = nil
      if not granted then
        qcall('HSET', q.info, id, 'l ' .. ms(d[1]) .. ' ' .. ms(d[2]) .. ' ' .. ms(d[3]))
      end
    end

    -- nextTurn returns the waiter whose turn a free lock key is now, and for
    -- how many ms the key is kept for it; or nil: the key goes to whoever tries
    -- first. The turn is the oldest live waiter's that is sure to try soon: one
    -- that is woken by the release message gets r.window ms; one that polls,
    -- only if it is due soon (turnFor), and then until then plus r.slack (a
    -- poller due later is passed over this time, and keeps its place: the key
    -- would idle until it tries). Entries met on the way are dropped if they
    -- lapsed, cannot be read, or were given a turn that ended more than
    -- r.window ago without their trying since (a waiter that died, or missed
    -- its turn: it queues again when it tries); at most 64 per call. At most
    -- r.look live entries are examined. The entry of self, the waiter that
    -- runs the script, is never dropped: it is trying now; if it is the first
    -- in line, it is the turn. now may be nil: the clock is then read if the
    -- queue is not empty, and returned as the third result. The fourth is how
    -- many listeners were dropped: each is one place that the waiters behind
    -- them move up without a turn, to be announced (announce).
    local function nextTurn(q, now, r, self)
      local seen, dropped, deaf = 0, 0, 0
      while seen < r.look and dropped < 64 do
        local ids = qcall('ZRANGE', q.order, seen, seen + r.look - 1)
        if not ids or #ids == 0 then
          return nil, 0, now, dropped - deaf, seen == 0
        end
        now = now or clock()
        if not now then
          return nil, 0, nil, 0
        end
        for _, id in ipairs(ids) do
          local kind, due, lapse, ended = waiter(q, id)
          if id == self then
            return id, 0, now, dropped - deaf
          elseif gone(kind, lapse, ended, now, r) then
            drop(q, id)
            dropped = dropped + 1
            if kind == 'p' then
              deaf = deaf + 1
            end
            if dropped >= 64 then
              break
            end
          else
            seen = seen + 1
            local n = turnFor(q, id, kind, due, lapse, ended, now, r)
            if n then
              return id, n, now, dropped - deaf
            end
          end
          if seen >= r.look then
            break
          end
        end
      end
      return nil, 0, now, dropped - deaf
    end

    -- announce publishes the release message on channel for lock key lk n
    -- times (at most 65: a turn and 64 drops): a turn given, and places moved
    -- up (nextTurn). A Spring waiter takes each for a release, and tries:
    -- harmlessly.
    local function announce(channel, lk, n)
      for _ = 1, math.min(n, 65) do
        redis.call('PUBLISH', channel, lk)
      end
    end

    -- turnOf returns the waiter whose turn it is, or nil. A turn that is not
    -- a string, or that lives for ever or far longer than any turn (PERSIST,
    -- a restore, a hand-written value), is deleted: it would keep the key for
    -- nobody.
    local function turnOf(q)
      local v = redis.pcall('GET', q.turn)
      if type(v) == 'table' and v.err then
        redis.call('DEL', q.turn)
        return nil
      end
      if not v then
        return nil
      end
      local left = redis.call('PTTL', q.turn)
      if left < 0 or left > 60000 then
        redis.call('DEL', q.turn)
        return nil
      end
      return v
    end

    -- grant makes it waiter id's turn for n ms.
    local function grant(q, id, n)
      redis.call('SET', q.turn, id, 'PX', ms(math.max(1, n)))
    end

    return {ms = ms, qcall = qcall, waiter = waiter, drop = drop, enqueue = enqueue, describe = describe, gone = gone, soon = soon, turnFor = turnFor, settle = settle, nextTurn = nextTurn, announce = announce, turnOf = turnOf, grant = grant, pause = pause}
  end

  -- permitRules returns the rules of a semaphore (the sem*.lua scripts); its
  -- admit takes the wait queue's rules R. A semaphore key is a sorted set:
  -- token -> the server time (ms) at which that permit expires. It has the
  -- wait queue of a lock key (q.order, q.polls, q.info; no turn key): the
  -- waiters first in line that are sure to try soon (as for nextTurn) are
  -- admitted, as many as permits are free, and a caller that is not in line
  -- only while fewer wait than permits are free. A listener is told its
  -- turn on its registry's turn channel (tell), not by a release message:
  -- it waits for that one message, and those behind it need none.
  local function permitRules()
    local function ms(n)
      return string.format('%d', n)
    end

    -- prune drops the expired permits of key, and returns how many it
    -- dropped.
    local function prune(key, now)
      return redis.call('ZREMRANGEBYSCORE', key, '-inf', ms(now))
    end

    -- live returns how many permits of key have not expired, in one call:
    -- the expired ones are left for held (semacquire.lua, when they would
    -- refuse an attempt) and for the key's own expiry.
    local function live(key, now)
      return redis.call('ZCOUNT', key, '(' .. ms(now), '+inf')
    end

    -- held returns how many permits of key are held, of total in the key
    -- (its ZCARD), and drops the expired ones if there are any: a refusal,
    -- the common case, costs one call.
    local function held(key, now, total)
      local n = live(key, now)
      if n < total then
        prune(key, now)
      end
      return n
    end

    -- fenced returns a new fencing token from the counter fence, and keeps
    -- the counter alive at least ttl ms (nextFence may have just seeded it,
    -- without a time to live).
    local function fenced(fence, ttl)
      local n = nextFence(fence)
      if redis.call('PTTL', fence) < ttl then
        redis.call('PEXPIRE', fence, ttl)
      end
      return n
    end

    -- hold sets permit token of key to expire ttl ms after now, keeps key
    -- alive at least as long, and returns a new fencing token from the
    -- counter fence (nil: 0), which lives as long as key (it is seeded from
    -- the clock again after it expires: see nextFence); held is how many
    -- permits key held (0: the key is new).
    local function hold(key, token, now, ttl, fence, held)
      redis.call('ZADD', key, ms(now + ttl), token)
      if held == 0 or redis.call('PTTL', key) < ttl then
        redis.call('PEXPIRE', key, ttl)
      end
      if not fence then
        return 0
      end
      return fenced(fence, ttl)
    end

    -- admit reports whether self (a waiter id, or nil for a caller not in
    -- line) may take one of free permits: fewer than free waiters ahead of it
    -- are sure to try soon (a listener; a poller due within r.ahead ms; a
    -- poller due later is passed over and keeps its place). Each of those
    -- whose turn was not yet given gets it (marked to end as nextTurn marks
    -- it); the second result lists the listeners among them, for the caller
    -- to tell (tell). Entries that lapsed, cannot be read, or were given a
    -- turn that ended more than r.window ago are dropped, at most 64. At most
    -- 64 live entries are examined (the ids read in batches: free + 1 first,
    -- which is most often enough, then 16; each entry's info by HGET, which
    -- the least-privilege ACL allows). Past them the free permits are
    -- anyone's, as a lock key is when nextTurn finds nobody: self is admitted
    -- if fewer than free were ahead, so that a listener behind many pollers
    -- not yet due is not refused while a permit idles. rank: self's place
    -- in line if the caller read it already (false: not in line), else nil.
    local function admit(R, q, now, free, self, r, rank)
      local told = {}
      if free <= 0 then
        return false, told
      end
      if self then
        if rank == nil then
          rank = R.qcall('ZRANK', q.order, self)
        end
        if rank and rank < free then -- fewer in line ahead of it than free permits
          return true, told
        end
      end
      local ahead, dropped, seen, start, batch = 0, 0, 0, 0, math.min(free + 1, 16)
      while dropped < 64 and seen < 64 do
        local ids = R.qcall('ZRANGE', q.order, start, start + batch - 1)
        if not ids or #ids == 0 then
          return true, told
        end
        batch = 16
        for _, id in ipairs(ids) do
          if id == self then
            return true, told
          end
          local kind, due, lapse, ended = R.waiter(q, id)
          if R.gone(kind, lapse, ended, now, r) then
            R.drop(q, id)
            dropped = dropped + 1
            if dropped >= 64 then
              break
            end
          else
            start, seen = start + 1, seen + 1
            local n, marked = R.turnFor(q, id, kind, due, lapse, ended, now, r, true)
            if n then
              ahead = ahead + 1
              if marked and kind == 'l' then
                told[#told + 1] = id
              end
              if ahead >= free then
                return false, told
              end
            end
          end
        end
      end
      return true, told
    end

    -- toBack puts waiter id, in line or not, at the back of the queue q
    -- (the wait queue's rules R) as a waiter of kind that begins to wait
    -- now. It is enqueue for a waiter known to be last, with fewer calls:
    -- describe follows it.
    local function toBack(R, q, id, kind, now)
      local since = string.format('%.3f', now)
      R.qcall('ZADD', q.order, since, id)
      if kind == 'p' then
        R.qcall('ZADD', q.polls, since, id)
      end
    end

    -- deliver tells each listener of told (admit) that its turn has come,
    -- on its registry's turn channel (tell): TURNPREFIX REGID ':' KEY. A
    -- listener whose entry carries a grant record (field id .. '|' of
    -- q.info, written by its refused attempt: semacquire.lua's ARGV[18],
    -- 'PREFIX COUNT TTL SEQ MORE IDLE FENCED') is given a permit instead,
    -- if COUNT is count (the suffix of this semaphore's tokens: the
    -- waiter's count of permits is the holders') and its registry
    -- listens: a probe (the turn prefix with '|' for its ':', REGID '|:'
    -- KEY: wire.Layout.ProbeChannel, which the registry ignores, and a
    -- subscriber to every registry's turns does not hear) that the server
    -- delivered to a subscriber (PUBLISH counts its receivers) is
    -- followed by the permit PREFIX SEQ COUNT, set for
    -- TTL ms unless it is set already, with a fencing token from the
    -- counter fence if FENCED is 1, and the grant message TURNPREFIX
    -- REGID '|' SEQ '.' FENCE COUNT ':' KEY (wire.Layout.GrantChannel).
    -- With MORE leases of the registry waiting behind, its entry queues
    -- again at the back (as semacquire.lua's granted), its record for
    -- SEQ + 1 and MORE - 1, due in IDLE ms; else it leaves the line. The grant message is sent only
    -- for a permit set, so a count that misses a receiver (a Cluster
    -- counts those of one node) costs a grant, never a permit: a probe
    -- heard by nobody, like every case without a grant, is followed by
    -- the turn message. A grant message lost on the way is claimed by the
    -- waiter's next attempt (semacquire.lua, ARGV[19]).
    local function deliver(R, q, key, told, now, prefix, fence, count)
      for _, id in ipairs(told) do
        local reg = string.match(id, '^([^/]+)/')
        if reg then
          local pre, c, ttl, seq, more, idle, fenced
          local rec = R.qcall('HGET', q.info, id .. '|')
          if type(rec) == 'string' then
            pre, c, ttl, seq, more, idle, fenced = string.match(rec, '^(%S+) (%S+) (%d+) (%d+) (%d+) (%d+) ([01])$')
          end
          local granted = false
          local heard = pre and c == count and redis.pcall('PUBLISH', string.sub(prefix, 1, -2) .. '|' .. reg .. '|:' .. key, key)
          if type(heard) == 'number' and heard > 0 then
            ttl = ttl + 0
            if redis.call('ZADD', key, 'NX', ms(now + ttl), pre .. seq .. c) == 1 then
              granted = true
              if redis.call('PTTL', key) < ttl then
                redis.call('PEXPIRE', key, ttl)
              end
              local f = 0
              if fenced == '1' then
                f = nextFence(fence)
                if redis.call('PTTL', fence) < ttl then
                  redis.call('PEXPIRE', fence, ttl)
                end
              end
              if more + 0 > 0 then
                toBack(R, q, id, 'l', now)
                local due = now + idle
                R.describe(q, id, 'l', now, due, due + idle,
                  table.concat({pre, c, ttl, ms(seq + 1), ms(more - 1), idle, fenced}, ' '))
              else
                R.drop(q, id)
              end
              redis.pcall('PUBLISH', prefix .. reg .. '|' .. seq .. '.' .. ms(f) .. c .. ':' .. key, key)
            end
          end
          R.settle(q, id, granted)
          if not granted then
            redis.pcall('PUBLISH', prefix .. reg .. ':' .. key, key)
          end
        else
          R.settle(q, id, false)
        end
      end
    end

    -- offer gives the turns of free permits of key to the waiters first in
    -- line (admit, for a caller not in line) and tells the listeners among
    -- them (deliver, on prefix): what every script does with permits that
    -- it freed, or found free, beside the one it deals with.
    local function offer(R, q, key, now, free, prefix, r, fence, count)
      local _, told = admit(R, q, now, free, nil, r)
      deliver(R, q, key, told, now, prefix, fence, count)
    end

    -- soonest returns the ms until the first permit of key expires, or -2
    -- when none is held.
    local function soonest(key, now)
      local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
      if #first == 0 then
        return -2
      end
      return math.max(math.floor(first[2] - now), 0)
    end
    return {prune = prune, held = held, live = live, fenced = fenced, hold = hold, admit = admit, tell = tell, deliver = deliver, offer = offer, toBack = toBack, soonest = soonest}
  end
  return clock, nextFence, queueRules, permitRules, tell
end
