-- multidrop: the quick form of multirelease.lua, for the common case:
-- nobody is in line for any of the keys. It deletes the keys that the
-- token holds and publishes their release messages; with anyone in line
-- it changes nothing and leaves the release to multirelease.lua, which
-- gives the turns. It declares two keys per lock key, not five.
--
-- KEYS     N lock keys, then their N wait queues
-- ARGV[1]  token of the multi-key hold
-- ARGV[2]  the release channels' prefix (registryKey-channel:)
--
-- Reply: 1: the token held every key, and released them all; else one
--        integer per lock key, as multirelease.lua's (1 released, 0 gone
--        or another holder's); or -1: someone is in line, nothing
--        changed.
local n = #KEYS / 2
local values = redis.pcall('MGET', unpack(KEYS, 1, n))
local e = redis.pcall('EXISTS', unpack(KEYS, n + 1, 2 * n))
if type(values) ~= 'table' or values.err or e ~= 0 then
  return -1
end
local all = true
for i = 1, n do
  if values[i] ~= ARGV[1] then
    all = false
    break
  end
end
if all then -- the common case: no table built
  redis.call('DEL', unpack(KEYS, 1, n))
  for i = 1, n do
    redis.call('PUBLISH', ARGV[2] .. KEYS[i], KEYS[i])
  end
  return 1
end
local out, mine = {}, {}
for i = 1, n do
  out[i] = values[i] == ARGV[1] and 1 or 0
  if out[i] == 1 then
    mine[#mine + 1] = KEYS[i]
  end
end
if #mine > 0 then
  redis.call('DEL', unpack(mine))
  for _, lk in ipairs(mine) do
    redis.call('PUBLISH', ARGV[2] .. lk, lk)
  end
end
return out
