-- multirelease: give back every lock key of KEYS that the token holds, as
-- release.lua gives back one: delete it, give its turn to the next waiter
-- in line (prelude.lua, nextTurn), and publish the release message. A key
-- that the token no longer holds (expired, or another's) is left alone:
-- the others are released all the same. Runs after prelude.lua.
--
-- KEYS     five per lock key, as release.lua's: lock key, wait queue,
--          queue info, turn, pollers
-- ARGV[1]  token of the multi-key hold
-- ARGV[2]  the release channels' prefix (registryKey-channel:)
-- ARGV[3]  a listening waiter's turn, in ms
-- ARGV[4]  how soon (ms) a polling waiter must be due to get a turn
-- ARGV[5]  ms added to a polling waiter's turn
--
-- Reply: one integer per lock key, in order: 1 released, 0 the key was
--        gone or another holder's (nothing changed).
local n = #KEYS / 5
local out = {}
local R, now = nil, nil
local rules = {window = ARGV[3] + 0, ahead = ARGV[4] + 0, slack = ARGV[5] + 0, look = 4}
for i = 1, n do
  local b = 5 * i - 4
  local lk = KEYS[b]
  out[i] = 0
  if redis.pcall('GET', lk) == ARGV[1] then
    out[i] = 1
    redis.call('DEL', lk)
    local channel = ARGV[2] .. lk
    if queueEmpty(KEYS[b + 1]) then
      redis.call('PUBLISH', channel, lk)
    else
      if not R then
        local _, _, queueRules = shared()
        R = queueRules()
      end
      local q = {order = KEYS[b + 1], info = KEYS[b + 2], turn = KEYS[b + 3], polls = KEYS[b + 4]}
      local next, k, moved
      next, k, now, moved = R.nextTurn(q, now, rules)
      if next then
        R.grant(q, next, k)
      end
      R.announce(channel, lk, moved + 1)
    end
  end
end
return out
