-- inspect: read what a lock key or a semaphore key holds now, and who
-- waits for it, without writing anything (Registry.Inspect). Runs after
-- prelude.lua (clock).
--
-- KEYS     lock key (or semaphore key, or read-write lock key), wait queue,
--          queue info, fence counter, readers (a read-write lock's)
-- ARGV[1]  the most holders and waiters to list (each)
-- ARGV[2]  a listening waiter's turn, in ms: an entry whose turn ended
--          longer ago than that is gone (prelude.lua, gone)
--
-- Reply: {type, fence, now, nholders, token1, ttl1, ..., nwaiters, id1,
--        waited1, ...}
--        type is the lock key's type: 'none', 'string' (a lock: one
--        holder, with its PTTL in ms, -1 when the key has none), 'zset' (a
--        semaphore: its permits that have not expired by the server's
--        clock, each with the ms it has left, soonest first), 'hash:w' (a
--        read-write lock's writer, with its PTTL), 'hash:r' (its readers
--        that have not expired, as a semaphore's permits), or another
--        (not a key of ours: no holders), named by TYPE if the script may
--        call it. The type is found by GET and ZRANGE themselves, so that
--        an ACL for locks alone need not allow TYPE. fence is the fence counter, 0
--        when it is missing or not a number. now is the server's time in
--        ms, -1 when the script may not call TIME (then a semaphore's
--        permits and the waiters are not listed: their times are on that
--        clock). The waiters are the live entries of the wait queue (as
--        prelude.lua's gone rules them), oldest first (a registry's lock or
--        semaphore instance each), with how long (ms) each has waited.
local most = tonumber(ARGV[1])
local fence = 0
local f = redis.pcall('GET', KEYS[4])
if type(f) == 'string' then
  fence = tonumber(f) or 0
end
local clock = shared()
local now = clock()
local out = {'none', fence, now and math.floor(now) or -1, 0}

local v = redis.pcall('GET', KEYS[1])
if type(v) == 'string' then
  out[1], out[4] = 'string', 1
  out[5] = v
  out[6] = redis.call('PTTL', KEYS[1])
elseif type(v) == 'table' and v.err then
  if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
    return v -- the error reply (NOPERM, ...)
  end
  local permits = redis.pcall('ZRANGE', KEYS[1], '(' .. string.format('%d', now or 0), '+inf', 'BYSCORE', 'LIMIT', 0, most, 'WITHSCORES')
  if type(permits) == 'table' and not permits.err then
    out[1] = 'zset'
    if now then
      out[4] = #permits / 2
      for i = 1, #permits, 2 do
        out[#out + 1] = permits[i]
        out[#out + 1] = math.floor(tonumber(permits[i + 1]) - now)
      end
    end
  elseif string.sub(permits.err, 1, 9) ~= 'WRONGTYPE' then
    return permits -- the error reply
  else
    local rw = redis.pcall('HMGET', KEYS[1], 'w', 'r')
    if not rw.err and rw[1] then
      out[1], out[4] = 'hash:w', 1
      out[5] = rw[1]
      out[6] = redis.call('PTTL', KEYS[1])
    elseif not rw.err and rw[2] and now then
      out[1] = 'hash:r'
      local readers = redis.call('ZRANGE', KEYS[5], '(' .. string.format('%d', now), '+inf', 'BYSCORE', 'LIMIT', 0, most, 'WITHSCORES')
      out[4] = #readers / 2
      for i = 1, #readers, 2 do
        out[#out + 1] = readers[i]
        out[#out + 1] = math.floor(tonumber(readers[i + 1]) - now)
      end
    elseif not rw.err and rw[2] then
      out[1] = 'hash:r'
    else
      local t = redis.pcall('TYPE', KEYS[1])
      out[1] = type(t) == 'table' and t.ok or 'value of another type'
    end
  end
end

if not now then
  out[#out + 1] = 0
  return out
end
local ids = redis.pcall('ZRANGE', KEYS[2], 0, 4 * most, 'WITHSCORES')
local live = {}
if type(ids) == 'table' and not ids.err then
  for i = 1, #ids, 2 do
    if #live >= 2 * most then
      break
    end
    local v = redis.pcall('HGET', KEYS[3], ids[i])
    local lapse, ended = nil, nil
    if type(v) == 'string' then
      lapse, ended = string.match(v, '^[lp] %d+ (%d+) ?(%d*)$')
    end
    ended = tonumber(ended) or 0
    if lapse and tonumber(lapse) > now and (ended == 0 or ended + tonumber(ARGV[2]) >= now) then
      live[#live + 1] = ids[i]
      live[#live + 1] = math.floor(now - tonumber(ids[i + 1]))
    end
  end
end
out[#out + 1] = #live / 2
for _, v in ipairs(live) do
  out[#out + 1] = v
end
return out
