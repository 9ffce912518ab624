-- rwdowngrade: turn a read-write lock's write hold into a read hold in
-- one step, so that no writer gets in between, and give the turns of the
-- readers at the front of the line, who may now enter beside it. Runs
-- after prelude.lua and rwrules.lua.
--
-- KEYS     as rwacquire.lua
-- ARGV[1]  token of the hold
-- ARGV[2]  time to live in ms, for the read hold
-- ARGV[3]  turn prefix (as rwacquire.lua's ARGV[8])
-- ARGV[4]  a listening waiter's turn, in ms
-- ARGV[5]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[6]  ms added to a polling waiter's turn
--
-- Reply: 1 downgraded (also when the token reads already: a resend after
--        a lost reply); 2 downgraded, with a writer in line (among its
--        first 16): the registry's readers that come later do not share
--        the hold; 0 the hold was gone.
local v = redis.pcall('HMGET', KEYS[1], 'w', 'r')
if v.err then
  return 0
end
if v[1] ~= ARGV[1] then
  if not v[1] and v[2] and redis.call('ZSCORE', KEYS[7], ARGV[1]) then
    return 1
  end
  return 0
end
local clock, _, queueRules, permitRules, tell = shared()
local now = clock()
if not now then
  return redis.error_reply('ERR lockyard: a read-write lock needs the TIME command')
end
local ttl = ARGV[2] + 0
redis.call('HDEL', KEYS[1], 'w')
redis.call('DEL', KEYS[7])
local R = queueRules()
local RW = rwRules()
RW.take(KEYS[1], KEYS[7], 'r', ARGV[1], now, ttl, nil, nil)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[7], ttl)
if not queueEmpty(KEYS[2]) then
  local q = {order = KEYS[2], info = KEYS[3], polls = KEYS[5]}
  local _, told, behind = RW.walk(R, q, now, {window = ARGV[4] + 0, ahead = ARGV[5] + 0, slack = ARGV[6] + 0}, nil, 'r', false, 1)
  if #told > 0 then
    RW.deliver(R, q, KEYS[1], KEYS[7], told, now, ARGV[3], KEYS[6], behind, tell, permitRules)
  end
  if RW.writerFrom(R, q, 0) then
    return 2
  end
end
return 1
