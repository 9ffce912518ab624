-- semrelease: give back a permit of a semaphore if this holder still has
-- it, and give the turns of the permits now free to the waiters in line
-- (prelude.lua, permitRules), each listener told on its registry's turn
-- channel. With nobody in line nothing is published. Runs after
-- prelude.lua.
--
-- KEYS     as semacquire.lua: semaphore key, wait queue, queue info, turn
--          (unused), pollers, fence counter; or the semaphore key alone,
--          while their Cluster slot migrates (as release.lua): the permit
--          is given back, and the waiters, told no turn, find it free when
--          they next try (a fenced semaphore's counter is then left to its
--          TTL)
-- ARGV[1]  token of the permit
-- ARGV[2]  turn prefix (as semacquire.lua's ARGV[8])
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
-- ARGV[6]  permits
-- ARGV[7]  1 when the semaphore is fenced: the last permit given back,
--          with nobody in line, deletes the fence counter too (the next
--          acquisition seeds it from the clock again: see nextFence)
-- ARGV[8]  1 when the permit was given back already, by a plain ZREM
--          that found waiters queued (semProto.releasePlain), or may have
--          been: give the turns of the free permits only (ARGV[1] unused)
--
-- Reply: 1 given back; 2 the same, and waiters are queued; 0 the permit
--        was gone (pruned after it expired), or the key is not a sorted
--        set: nothing changes. A permit that expired but was not pruned
--        yet is given back as one that had not: the releasing client
--        learns of the loss from its own deadline, which ends before the
--        permit's expiry.
if ARGV[8] ~= '1' and redis.pcall('ZREM', KEYS[1], ARGV[1]) ~= 1 then
  return 0
end
if #KEYS == 1 then
  return 2
end
-- finish returns the reply once the turns are given: 1 when nobody is in
-- line (and a fenced semaphore's counter is deleted if nobody holds a
-- permit either), else 2.
local function finish()
  if not queueEmpty(KEYS[2]) then
    return 2
  end
  if ARGV[7] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[6])
  end
  return 1
end
if finish() == 1 then
  return 1
end
local now = clock()
if not now then
  return 2
end
local f = string.format
local free = ARGV[6] - redis.call('ZCOUNT', KEYS[1], '(' .. f('%d', now), '+inf') -- permitRules' live
-- The lean turn: one permit free, and the first in line a live waiter that
-- is sure to try soon, whose turn was not given yet (or is running): what
-- offer does in that case (prelude.lua: admit, turnFor, deliver, settle),
-- in the same calls but one (ZRANGE of one entry, not two), without
-- defining a rule. A listener with a grant record of this semaphore's
-- count, not fenced, whose registry hears the probe, is given the permit
-- (and queued again at the back when more of its leases wait); another is
-- told its turn; a poller due soon is marked, as admit marks it. Any other
-- first entry (lapsed, passed over, unreadable, of a fenced grant) is left
-- to the general path before anything is written. lean_test.go runs both
-- paths on random states and requires the same replies, keys and messages.
repeat -- lean turn
  if free ~= 1 then
    break
  end
  local id, kind, due, lapse, ended, sure = firstLive(KEYS[2], KEYS[3], now, ARGV[3], ARGV[4], ARGV[5])
  local reg = id and string.match(id, '^([^/]+)/')
  if not reg or not sure then -- nobody, an entry to drop, one that names no registry, or a poller passed over
    break
  end
  if kind == 'p' then
    if ended == 0 then
      redis.call('HSET', KEYS[3], id, f('p %d %d %d', due, lapse, now + math.max(due - now, 0) + ARGV[5]))
    end
  elseif ended == 0 then
    local rec = redis.pcall('HGET', KEYS[3], id .. '|')
    local pre, c, ttl, seq, more, idle, fenced
    if type(rec) == 'string' then
      pre, c, ttl, seq, more, idle, fenced = string.match(rec, '^(%S+) (%S+) (%d+) (%d+) (%d+) (%d+) ([01])$')
    end
    local count, heard = '#' .. ARGV[6], nil
    if pre and c == count then
      if fenced == '1' then
        break
      end
      heard = redis.pcall('PUBLISH', string.sub(ARGV[2], 1, -2) .. '|' .. reg .. '|:' .. KEYS[1], KEYS[1])
    end
    if type(heard) == 'number' and heard > 0 and redis.call('ZADD', KEYS[1], 'NX', f('%d', now + ttl), pre .. seq .. c) == 1 then
      ttl = ttl + 0
      if redis.call('PTTL', KEYS[1]) < ttl then
        redis.call('PEXPIRE', KEYS[1], ttl)
      end
      if more + 0 > 0 then -- toBack and describe
        redis.call('ZADD', KEYS[2], f('%.3f', now), id)
        local at = now + idle
        redis.call('HSET', KEYS[3], id, f('l %d %d', at, at + idle), id .. '|', table.concat({pre, c, ttl, f('%d', seq + 1), f('%d', more - 1), idle, fenced}, ' '))
        keepAlive({KEYS[2], KEYS[3]}, now, at + idle)
      else -- drop
        redis.call('ZREM', KEYS[2], id)
        redis.call('HDEL', KEYS[3], id, id .. '|')
        local r = redis.pcall('ZREM', KEYS[5], id)
        if type(r) == 'table' and r.err then -- as qcall: another type is deleted, another error raised
          if string.sub(r.err, 1, 9) ~= 'WRONGTYPE' then
            redis.call('ZREM', KEYS[5], id)
          end
          redis.call('DEL', KEYS[5])
        end
      end
      redis.pcall('PUBLISH', ARGV[2] .. reg .. '|' .. seq .. '.0' .. c .. ':' .. KEYS[1], KEYS[1])
    else
      redis.call('HSET', KEYS[3], id, f('l %d %d %d', due, lapse, now + ARGV[3]))
      redis.pcall('PUBLISH', ARGV[2] .. reg .. ':' .. KEYS[1], KEYS[1])
    end
  end
  do
    return finish()
  end
until true
local _, _, queueRules, permitRules = shared()
local R = queueRules()
local P = permitRules()
local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
P.offer(R, q, KEYS[1], now, free, ARGV[2], {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0}, KEYS[6], '#' .. ARGV[6])
return finish()
