-- rwrules: the rules of a read-write lock, prepended after prelude.lua to
-- each rw*.lua script (rwproto.go). As the prelude's, they read no KEYS or
-- ARGV; rwRules(R) defines them when called, on the wait queue's rules R.
--
-- rwRules defines nothing that the fast paths do not need but its own few
-- functions: the wait queue's rules (prelude.lua, queueRules) are passed
-- to walk, which alone uses them, so that an uncontended acquisition
-- defines no queue rules.
--
-- A read-write lock key is a hash: field 'w' holds the writer's token
-- while a writer holds it (the key's TTL is then the writer's, as a lock
-- key's), field 'r' is '1' while readers hold it. Its readers are a sorted
-- set in its slot (the side key 'readers'): token -> the server time (ms)
-- at which that reader's hold expires, so that a reader that dies frees
-- its share at its own TTL, and no release scans the others. Both keys
-- live at least as long as their latest reader. A registry's readers of a
-- key share one token (rwlock.go), so the set holds about one entry per
-- process that reads.
--
-- Waiters queue in the wait queue of a lock key (prelude.lua: q.order,
-- q.info, q.polls; no turn key), their id ending in '/r' or '/w': the
-- side they wait for. The line is served in order by phase: the readers at
-- its front enter together, a writer enters alone once no reader holds,
-- and a waiting writer holds up every reader behind it (a poller not due
-- soon is passed over and keeps its place, as for a lock). Listeners are
-- told their turn on their registry's turn channel (the prelude's tell).
local function rwRules()
  local function ms(n)
    return string.format('%d', n)
  end

  -- readers returns how many readers hold key k (readers rk), pruning
  -- the expired ones; flag is field 'r' of k. A key whose readers all
  -- expired loses its 'r' (and so, with no writer, is deleted).
  local function readers(k, rk, flag, now)
    if not flag then
      return 0
    end
    redis.call('ZREMRANGEBYSCORE', rk, '-inf', ms(now))
    local n = redis.call('ZCARD', rk)
    if n == 0 then
      redis.call('HDEL', k, 'r')
    end
    return n
  end

  -- soonest returns the ms until the first holder of k expires: the
  -- writer's PTTL, or the first reader's; -2 when nobody holds it.
  local function soonest(k, rk, writer, now)
    if writer then
      return redis.call('PTTL', k)
    end
    local first = redis.call('ZRANGE', rk, '0', '0', 'WITHSCORES')
    if #first == 0 then
      return -2
    end
    return math.max(math.floor(first[2] - now), 0)
  end

  -- take gives k to token on side ('r' or 'w') for ttl ms, and returns a
  -- new fencing token from the counter fence (nil: 0), kept alive as long
  -- as the hold. A reader's entry that exists already (a registry's shared
  -- hold, admitted again) keeps the later of its expiries. reading is
  -- field 'r' of k as the caller read it.
  local function take(k, rk, side, token, now, ttl, fence, P, reading)
    if side == 'w' then
      redis.call('HSET', k, 'w', token)
      redis.call('PEXPIRE', k, ttl)
    else
      redis.call('ZADD', rk, 'GT', ms(now + ttl), token)
      if not reading then
        redis.call('HSET', k, 'r', '1')
      end
      if redis.call('PTTL', k) < ttl then
        redis.call('PEXPIRE', k, ttl)
        redis.call('PEXPIRE', rk, ttl)
      end
    end
    if not fence then
      return 0
    end
    return P.fenced(fence, ttl) -- P: permitRules()
  end

  -- walk (on the wait queue's rules R) gives the turns of the line to the waiters at its front that may
  -- enter now (none while writer holds k; readers, the readers before the
  -- first waiting writer; that writer, once no reader holds or enters
  -- before it), and reports whether self (a waiter id, or nil: a caller
  -- not in line) may enter on side: a reader once no waiting writer is
  -- ahead of it (a writer that polls holds up the readers once it is due
  -- soon or has waited a poll), a writer once nobody is. Its second result lists the
  -- listeners given a turn, to tell; its third is true when a waiting
  -- writer that cannot enter yet stopped it (the readers that hold the key
  -- go first); its fourth, when it stopped at self (those behind it were
  -- not looked at), self's rank in line. Entries that lapsed are dropped (at
  -- most 64), and at most 64 live ones are examined, as admit does.
  local function walk(R, q, now, r, self, side, writer, held)
    local told = {}
    if writer then
      return false, told
    end
    local turns, dropped, seen, start = 0, 0, 0, 0
    while dropped < 64 and seen < 64 do
      local ids = R.qcall('ZRANGE', q.order, start, start + 15, 'WITHSCORES')
      if not ids or #ids == 0 then
        break
      end
      for i = 1, #ids, 2 do
        local id, since = ids[i], ids[i + 1] + 0
        if id == self then
          return side == 'r' or (held == 0 and turns == 0), told, false, start
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
          if string.sub(id, -1) == 'w' then
            if held == 0 and turns == 0 then
              local n, marked = R.turnFor(q, id, kind, due, lapse, ended, now, r, true)
              if n then
                if marked and kind == 'l' then
                  told[#told + 1] = id
                end
                return false, told
              end
            elseif kind == 'l' or due - now <= r.ahead or now - since >= lapse - due then
              -- It waits for the readers that hold the key, and holds up
              -- those behind it: a listener, a poller due soon, and a
              -- poller that has waited a poll interval already (lapse -
              -- due) whatever its due, or readers that kept coming would
              -- keep it out for good. A poller that began to wait less
              -- than a poll ago and is not due soon is passed over.
              return false, told, true
            end
          else
            local n, marked = R.turnFor(q, id, kind, due, lapse, ended, now, r, true)
            if n then
              turns = turns + 1
              if marked and kind == 'l' then
                told[#told + 1] = id
              end
            end
          end
          if seen >= 64 then
            break
          end
        end
      end
    end
    return side == 'r' or (held == 0 and turns == 0), told
  end

  -- yield tells the registries whose readers hold k (their tokens in rk,
  -- at most 64) that a writer waits: each stops sharing its hold with new
  -- readers of its own, which queue behind the writer.
  local function yield(prefix, k, rk)
    local seen = {}
    for _, token in ipairs(redis.call('ZRANGE', rk, '0', '63')) do
      local reg = string.match(token, '^(.*):')
      if reg and not seen[reg] then
        seen[reg] = true
        redis.pcall('PUBLISH', prefix .. reg .. ':' .. k, k)
      end
    end
  end

  -- writerFrom reports whether a writer's entry is among the 16 of line
  -- q from rank i: a reader let in there leaves a writer behind it.
  local function writerFrom(R, q, i)
    for _, id in ipairs(R.qcall('ZRANGE', q.order, i, i + 15) or {}) do
      if string.sub(id, -2) == '/w' then
        return true
      end
    end
    return false
  end

  -- deliver tells each listener of told (walk) that its turn has come, on
  -- its registry's turn channel (tell: TURNPREFIX REGID ':' k), or gives it
  -- the key instead: a listener whose entry carries a grant record (field
  -- id .. '|' of q.info, written by its refused attempt: rwacquire.lua's
  -- ARGV[15], 'PREFIX SEQ TTL FENCED ATTEMPT') is given the side it waits
  -- for (take: the token PREFIX SEQ, for TTL ms, with a fencing token from
  -- the counter fence if FENCED is 1) if its registry listens: a probe
  -- (wire.Layout.ProbeChannel, as the prelude's deliver sends) that the
  -- server delivered to a subscriber (PUBLISH counts its receivers). Its entry
  -- then leaves the line, and the grant message TURNPREFIX REGID '|' SEQ
  -- '.' FENCE '@' BEHIND '.' ATTEMPT ':' k (wire.Layout.GrantChannel)
  -- tells the registry, ATTEMPT naming the attempt that wrote the record
  -- (its TTL counts from when that attempt was sent), BEHIND 1 when a
  -- writer waits behind the readers told (behind, from the caller; or a
  -- writer's entry among the first 16 in line, writerFrom: a poller that
  -- walk passed over counts), so that its readers that come later do
  -- not share the hold. A probe heard by nobody, like every case without
  -- a record, is followed by the turn message. A grant message lost on the
  -- way is claimed by the waiter's next attempt, which carries the granted
  -- token (rwacquire.lua). permitRules (the prelude's) gives the fencing
  -- rules, defined only for a fenced grant.
  local function deliver(R, q, k, rk, told, now, prefix, fence, behind, tell, permitRules)
    local plain = {}
    local writerBack = behind or nil -- nil: writerFrom not asked yet (once, when a reader is granted)
    for _, id in ipairs(told) do
      local reg = string.match(id, '^([^/]+)/')
      local pre, seq, ttl, fenced, attempt
      if reg then
        local rec = R.qcall('HGET', q.info, id .. '|')
        if type(rec) == 'string' then
          pre, seq, ttl, fenced, attempt = string.match(rec, '^(%S+) (%d+) (%d+) ([01]) (%d+)$')
        end
      end
      local heard = pre and redis.pcall('PUBLISH', string.sub(prefix, 1, -2) .. '|' .. reg .. '|:' .. k, k)
      if type(heard) == 'number' and heard > 0 then
        local side, f = string.sub(id, -1), nil
        if fenced == '1' then
          f = fence
        end
        local n = take(k, rk, side, pre .. seq, now, ttl + 0, f, f and permitRules(), false)
        R.drop(q, id)
        local b = '0'
        if side == 'r' then
          if writerBack == nil then
            writerBack = writerFrom(R, q, 0)
          end
          if writerBack then
            b = '1'
          end
        end
        R.settle(q, id, true)
        redis.pcall('PUBLISH', prefix .. reg .. '|' .. seq .. '.' .. ms(n) .. '@' .. b .. '.' .. attempt .. ':' .. k, k)
      else
        R.settle(q, id, false)
        plain[#plain + 1] = id
      end
    end
    tell(prefix, k, plain)
  end

  return {readers = readers, soonest = soonest, take = take, walk = walk, yield = yield, writerFrom = writerFrom, deliver = deliver}
end
