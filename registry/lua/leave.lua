-- leave: take a registry that stopped waiting out of the wait marker's
-- queue (see obtain.lua), so that a free lock is not kept for its turn
-- until its entry lapses.
--
-- KEYS[1]  wait marker key ({registryKey:key}:wait)
-- ARGV[1]  id of the registry
--
-- Reply: 1 when its entry was removed (the marker keeps its time to live,
--        or is deleted if it is empty), 0 when it had none.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) ~= 'string' then
  return 0
end
local kept, found = {}, false
for e in string.gmatch(raw, '%S+') do
  local id = string.match(e, '^(.+)[=~!]%d+/%d+$') or e
  if id == ARGV[1] then
    found = true
  else
    kept[#kept + 1] = e
  end
end
if not found then
  return 0
end
if #kept == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], table.concat(kept, ' '), 'KEEPTTL')
end
return 1
