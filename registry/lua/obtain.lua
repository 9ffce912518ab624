-- obtain: take the lock if it is free and it is not another registry's
-- turn; if not, queue this registry in the wait marker, which also makes
-- the holder's registry stop passing the lock among its own goroutines.
--
-- KEYS[1]  lock key (registryKey:key)
-- KEYS[2]  wait marker key ({registryKey:key}:wait)
-- KEYS[3]  fence counter key; present only when fencing is on
-- ARGV[1]  token, unique to this acquisition
-- ARGV[2]  time to live in milliseconds
-- ARGV[3]  time in milliseconds that a registry's wait counts after its
--          last attempt
-- ARGV[4]  id of the obtaining registry
-- ARGV[5]  2 if the registry waits and is woken by the release message
--          (a PubSubLock's Lock), 1 if it waits and polls (a SpinLock's
--          Lock), 0 if it does not wait (TryLock)
-- ARGV[6]  ms after which a waiting registry counts as long-waiting
--
-- The wait marker is the queue of registries waiting for the lock, oldest
-- first: "id=until/since id~until/since id!until/since ...", in server
-- time in ms: since when the registry waits, and until when its entry
-- counts unless it tries again. '=' marks a registry woken by the release
-- message, '~' one that polls, '!' one that does not wait. A free lock goes
-- to whoever tries first, the quickest hand-off, unless a '=' registry has
-- waited for more than ARGV[6]: then the lock is reserved for the oldest
-- waiting ('=' or '~') registry that has waited that long, and others are
-- queued and refused until it has taken it, or leaves (leave.lua), or its
-- entry lapses. So the registry that the server happens to notify last
-- does not lose every race, and a poller among them gets its turn too. While only pollers
-- wait nothing is reserved (a poller may sleep a whole poll interval). A
-- bare id, from an older lockyard, counts as a waiter until the marker
-- expires, and reserves nothing. If the script may not call TIME (an ACL
-- without +time), the marker is a bare id, as it was before the queue.
--
-- Reply: {1, fence} when acquired; fence is the new value of the counter
--        (strictly increasing per key), or 0 without fencing. The registry
--        leaves the queue.
--        The same when the key already holds ARGV[1]: a client that resent
--        this script (or a plain SET NX PX) after a lost reply gets the
--        lock it took, with the current value of the counter.
--        {0, pttl} when another holder has it; pttl is its remaining time
--        to live in ms, or -1 if the key has no expiry.
--        {2, pttl} the same, when another registry's turn comes before
--        this one's.
--        {2, ms} when the lock is free but reserved for another registry:
--        ms is the time until that registry's entry lapses.
--        In each of these cases the registry is queued (or its entry
--        renewed).
-- Error: WRONGTYPE when KEYS[1] holds something other than a string.
-- nextFence increments the fence counter key. A missing counter (a new
-- key, or one Redis lost: a restart without persistence, a failover to a
-- replica that lacked it, FLUSHALL) is first seeded with the server's clock
-- in microseconds, so that tokens keep increasing across such a loss while
-- the clock does not go back and the key sees fewer than a million
-- acquisitions a second on average.
local function nextFence(key)
  if not redis.call('GET', key) then
    local t = redis.call('TIME')
    redis.call('SET', key, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  return redis.call('INCR', key)
end
-- clock returns the server's time in ms, or nil if TIME is not allowed.
local function clock()
  local t = redis.pcall('TIME')
  if type(t) ~= 'table' or t.err then
    return nil
  end
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- queue parses the wait marker: its live entries {id, until, kind,
-- since}, oldest first; the index of this registry's entry (or nil); and
-- the index of the entry the lock is reserved for (or nil). No entry
-- counts for longer than the marker lives (a clock that went back).
local function queue(raw, now)
  local q, mine, first, pub = {}, nil, nil, false
  local aged = now - tonumber(ARGV[6])
  local limit = now + math.max(redis.call('PTTL', KEYS[2]), 0)
  for e in string.gmatch(raw, '%S+') do
    local id, kind, t, since = string.match(e, '^(.+)([=~!])(%d+)/(%d+)$')
    if id then
      t, since = math.min(tonumber(t), limit), tonumber(since)
    else
      id, kind, t, since = e, '!', limit, now
    end
    if t > now then
      q[#q + 1] = {id, t, kind, since}
      if id == ARGV[4] then
        mine = #q
      end
      if since <= aged and kind ~= '!' then
        first = first or #q
        pub = pub or kind == '='
      end
    end
  end
  if not pub then
    first = nil
  end
  return q, mine, first
end
-- save writes the queue back, living as long as its last entry, or deletes
-- the marker if it is empty.
local function save(q, now)
  if #q == 0 then
    redis.call('DEL', KEYS[2])
    return
  end
  local parts, last = {}, now + 1
  for i, e in ipairs(q) do
    parts[i] = e[1] .. e[3] .. string.format('%d/%d', e[2], e[4])
    last = math.max(last, e[2])
  end
  redis.call('SET', KEYS[2], table.concat(parts, ' '), 'PX', string.format('%d', last - now))
end
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  return redis.error_reply('WRONGTYPE lock key holds a value that is not a string')
end
if value == ARGV[1] then
  local fence = 0
  if KEYS[3] then
    fence = tonumber(redis.call('GET', KEYS[3]) or '0')
  end
  return {1, fence}
end
local now = clock()
local raw = redis.pcall('GET', KEYS[2])
if type(raw) ~= 'string' or not now then
  raw = nil -- no marker, or one this script cannot read (overwritten below)
end
local q, mine, first = {}, nil, nil
if raw then
  q, mine, first = queue(raw, now)
end
if not value and (not first or first == mine) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if raw then
    if mine then
      table.remove(q, mine)
    end
    save(q, now)
  end
  local fence = 0
  if KEYS[3] then
    fence = nextFence(KEYS[3])
  end
  return {1, fence}
end
if not now then -- no TIME: the marker names this registry, as before the queue
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
  return {0, redis.call('PTTL', KEYS[1])}
end
local kind = '!'
if ARGV[5] == '2' then
  kind = '='
elseif ARGV[5] == '1' then
  kind = '~'
end
local expiry = now + tonumber(ARGV[3])
if mine then
  q[mine][2], q[mine][3] = expiry, kind
else
  q[#q + 1] = {ARGV[4], expiry, kind, now}
end
save(q, now)
if not value then
  return {2, math.max(1, q[first][2] - now)}
end
if first and first ~= mine then
  return {2, redis.call('PTTL', KEYS[1])}
end
return {0, redis.call('PTTL', KEYS[1])}
