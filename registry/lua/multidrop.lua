-- multidrop: the quick form of multirelease.lua, for the common case:
-- nobody is in line for any of the keys. It deletes the keys that the
-- token holds and publishes their release messages; with anyone in line
-- it changes nothing and leaves the release to multirelease.lua, which
-- gives the turns. It declares two keys per lock key, not five.
--
-- KEYS     two per lock key: lock key, wait queue
-- ARGV[1]  token of the multi-key hold
-- ARGV[2]  the release channels' prefix (registryKey-channel:)
--
-- Reply: one integer per lock key, as multirelease.lua's (1 released, 0
--        gone or another holder's); or {-1}: someone is in line, nothing
--        changed.
local n = #KEYS / 2
local lks, queues = {}, {}
for i = 1, n do
  lks[i], queues[i] = KEYS[2 * i - 1], KEYS[2 * i]
end
local values = redis.pcall('MGET', unpack(lks))
local e = redis.pcall('EXISTS', unpack(queues))
if type(values) ~= 'table' or values.err or e ~= 0 then
  return {-1}
end
local out, mine = {}, {}
for i = 1, n do
  out[i] = values[i] == ARGV[1] and 1 or 0
  if out[i] == 1 then
    mine[#mine + 1] = lks[i]
  end
end
if #mine > 0 then
  redis.call('DEL', unpack(mine))
  for _, lk in ipairs(mine) do
    redis.call('PUBLISH', ARGV[2] .. lk, lk)
  end
end
return out
