-- rules: runs one rule of prelude.lua with a fixed clock, for
-- prelude_test.go. Prepended with prelude.lua.
--
-- KEYS[1..4]  the queue: order, info, turn, pollers
-- ARGV[1]     the rule: nextTurn, pause or join
-- nextTurn: ARGV[2] now, [3] window, [4] ahead, [5] slack, [6] self (or '')
--   Reply: {grantee or '', ms, the queue's ids in order, listeners dropped}
-- pause: ARGV[2] pttl, [3] rank, [4] turn's ms left or -1 (none), [5] idle, [6] spread
--   Reply: ms
-- join: ARGV[2] id, [3] now, [4] kind, [5] due, [6] lapse, [7] (optional)
--   1 to join as a caller that expects not to be in line (enqueue's new)
--   Reply: {waiters ahead that count, the queue's PTTL, 1 if the join put
--   the entry in line or 0}
-- The semaphore's rules (permitRules), KEYS[5] the semaphore key:
-- admit: ARGV[2] now, [3] free, [4] self (or '': offer's caller, not in line), [5] window,
--   [6] ahead, [7] slack, [8] (optional) the free permits of a second admit
--   in the same run, for a caller not in line, before either is delivered
--   Reply: {1 admitted or 0, the listeners told, the queue's ids in order,
--   the listeners the second admit told}
-- live: ARGV[2] now
--   Reply: {permits not expired, ms until the first expires or -2}
-- hold: ARGV[2] token, [3] now, [4] ttl, [5] 1 fenced (KEYS[6] the counter) or 0
--   Reply: {fence, the semaphore key's PTTL, the permit's expiry}
local _, _, queueRules, permitRules = shared()
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
  local rank, added = R.enqueue(q, ARGV[2], ARGV[4], now, false, ARGV[7] == '1')
  R.describe(q, ARGV[2], ARGV[4], now, tonumber(ARGV[5]), tonumber(ARGV[6]))
  return {rank, redis.call('PTTL', q.order), added and 1 or 0}
end
local P = permitRules()
local rules = {window = tonumber(ARGV[5]), ahead = tonumber(ARGV[6]), slack = tonumber(ARGV[7])}
if ARGV[1] == 'admit' then
  local self = ARGV[4]
  if self == '' then
    self = nil
  end
  local now = tonumber(ARGV[2])
  local ok, told = P.admit(R, q, now, tonumber(ARGV[3]), self, rules)
  local again = {}
  if ARGV[8] then
    -- A second admit in the same run, as offer's after the caller's
    -- (semacquire.lua), before either is delivered.
    _, again = P.admit(R, q, now, tonumber(ARGV[8]), nil, rules)
  end
  -- As deliver does with the listeners it tells their turn (not granted
  -- the key): their turns' marks are written.
  for _, list in ipairs({told, again}) do
    for _, id in ipairs(list) do
      R.settle(q, id, false)
    end
  end
  return {ok and 1 or 0, told, ids(), again}
elseif ARGV[1] == 'live' then
  local now = tonumber(ARGV[2])
  return {P.live(KEYS[5], now), P.soonest(KEYS[5], now)}
elseif ARGV[1] == 'hold' then
  local fence = nil
  if ARGV[5] == '1' then
    fence = KEYS[6]
  end
  local f = P.hold(KEYS[5], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), fence, redis.call('ZCARD', KEYS[5]))
  return {f, redis.call('PTTL', KEYS[5]), redis.call('ZSCORE', KEYS[5], ARGV[2])}
end
return redis.error_reply('unknown rule ' .. tostring(ARGV[1]))
