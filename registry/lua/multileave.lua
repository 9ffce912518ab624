-- multileave: take a multi-key waiter that stopped waiting out of the line
-- of each lock key of KEYS, as leave.lua does for one: the waiters behind
-- it move up (a release message tells them), a turn it held passes on, and
-- a free key goes to the next in line. Runs after prelude.lua.
--
-- KEYS     five per lock key, as leave.lua's: lock key, wait queue, queue
--          info, turn, pollers
-- ARGV[1]  waiter id
-- ARGV[2]  the release channels' prefix (registryKey-channel:)
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: how many lines it left.
local _, _, queueRules = shared()
local R = queueRules()
local rules = {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0, look = 4}
local left, now = 0, nil
for i = 1, #KEYS / 5 do
  local b = 5 * i - 4
  local lk = KEYS[b]
  local q = {order = KEYS[b + 1], info = KEYS[b + 2], turn = KEYS[b + 3], polls = KEYS[b + 4]}
  if R.qcall('ZRANK', q.order, ARGV[1]) then
    left = left + 1
    R.drop(q, ARGV[1])
    if R.turnOf(q) == ARGV[1] then
      redis.call('DEL', q.turn)
    end
    if (R.qcall('ZCARD', q.order) or 0) > 0 then
      local moved = 1 -- the waiters behind it move up a place
      if not redis.pcall('GET', lk) and not R.turnOf(q) then
        local next, n, more
        next, n, now, more = R.nextTurn(q, now, rules)
        if next then
          R.grant(q, next, n)
          more = more + 1
        end
        moved = moved + more
      end
      R.announce(ARGV[2] .. lk, lk, moved)
    end
  end
end
return left
