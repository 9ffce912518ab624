-- label: publish a registry's label (ARGV[1] set), or read one (no ARGV).
-- Runs alone (no prelude).
--
-- KEYS     the label key of a registry id (wire.Layout.LabelKey)
-- ARGV[1]  the label to set (absent: read it)
-- ARGV[2]  its time to live in ms
--
-- Reply: the label, or nil when none was published or it expired (read);
--        OK (set).
if ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return false
end
return v
