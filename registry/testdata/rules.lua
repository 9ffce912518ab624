-- rules: runs one rule of prelude.lua with a fixed clock, for
-- prelude_test.go. Prepended with prelude.lua.
--
-- KEYS[1..4]  the queue: order, info, turn, pollers
-- ARGV[1]     the rule: nextTurn, pause or join
-- nextTurn: ARGV[2] now, [3] window, [4] ahead, [5] slack, [6] self (or '')
--   Reply: {grantee or '', ms, the queue's ids in order, listeners dropped}
-- pause: ARGV[2] pttl, [3] rank, [4] turn's ms left or -1 (none), [5] idle, [6] spread
--   Reply: ms
-- join: ARGV[2] id, [3] now, [4] kind, [5] due, [6] lapse
--   Reply: {waiters ahead that count, the queue's PTTL}
local _, _, queueRules = shared()
local R = queueRules()
local q = {order = KEYS[1], info = KEYS[2], turn = KEYS[3], polls = KEYS[4]}
local function ids()
  local r = redis.pcall('ZRANGE', q.order, 0, -1)
  if type(r) ~= 'table' or r.err then
    return {}
  end
  return r
end
if ARGV[1] == 'nextTurn' then
  local id, n, _, moved = R.nextTurn(q, tonumber(ARGV[2]), {window = tonumber(ARGV[3]), ahead = tonumber(ARGV[4]), slack = tonumber(ARGV[5]), look = 4}, ARGV[6])
  return {id or '', n or 0, ids(), moved}
elseif ARGV[1] == 'pause' then
  local left = tonumber(ARGV[4])
  if left < 0 then
    left = nil
  end
  return R.pause(tonumber(ARGV[2]), tonumber(ARGV[3]), left, tonumber(ARGV[5]), tonumber(ARGV[6]))
elseif ARGV[1] == 'join' then
  local now = tonumber(ARGV[3])
  local rank = R.enqueue(q, ARGV[2], ARGV[4], now)
  R.describe(q, ARGV[2], ARGV[4], now, tonumber(ARGV[5]), tonumber(ARGV[6]))
  return {rank, redis.call('PTTL', q.order)}
end
return redis.error_reply('unknown rule ' .. tostring(ARGV[1]))
