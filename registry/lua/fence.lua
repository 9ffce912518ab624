-- fence: raise a fence counter to at least a value (Redlock: the highest
-- counter of the majority that granted the lock, written back to it so that
-- any later majority, which shares a node with this one, counts above it).
--
-- KEYS[1]  fence counter key
-- ARGV[1]  the value
--
-- Reply: the counter's value afterwards.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if cur < want then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return cur
