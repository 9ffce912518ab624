-- inspect: read what a lock key or a semaphore key holds now, and who
-- waits for it, without writing anything (Registry.Inspect). Runs after
-- prelude.lua (clock).
--
-- KEYS     lock key (or semaphore key), wait queue, queue info, fence counter
-- ARGV[1]  the most holders and waiters to list (each)
--
-- Reply: {type, fence, now, nholders, token1, ttl1, ..., nwaiters, id1,
--        waited1, ...}
--        type is the lock key's type: 'none', 'string' (a lock: one
--        holder, with its PTTL in ms, -1 when the key has none), 'zset' (a
--        semaphore: its permits that have not expired by the server's
--        clock, each with the ms it has left, soonest first), or another
--        (not a key of ours: no holders). fence is the fence counter, 0
--        when it is missing or not a number. now is the server's time in
--        ms, -1 when the script may not call TIME (then a semaphore's
--        permits and the waiters are not listed: their times are on that
--        clock). The waiters are the live entries of the wait queue, oldest
--        first (a registry's lock or semaphore instance each), with how
--        long (ms) each has waited.
local most = tonumber(ARGV[1])
local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then
  t = t.ok or t['ok']
end
local fence = 0
local f = redis.pcall('GET', KEYS[4])
if type(f) == 'string' then
  fence = tonumber(f) or 0
end
local now = clock()
local out = {t, fence, now and math.floor(now) or -1}

if t == 'string' then
  out[#out + 1] = 1
  out[#out + 1] = redis.call('GET', KEYS[1])
  out[#out + 1] = redis.call('PTTL', KEYS[1])
elseif t == 'zset' and now then
  local permits = redis.call('ZRANGE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'BYSCORE', 'LIMIT', 0, most, 'WITHSCORES')
  out[#out + 1] = #permits / 2
  for i = 1, #permits, 2 do
    out[#out + 1] = permits[i]
    out[#out + 1] = math.floor(tonumber(permits[i + 1]) - now)
  end
else
  out[#out + 1] = 0
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
    local lapse = type(v) == 'string' and string.match(v, '^[lp] %d+ (%d+)')
    if lapse and tonumber(lapse) > now then
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
