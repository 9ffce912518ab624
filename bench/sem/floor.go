package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	redigo "github.com/gomodule/redigo/redis"
)

// The floor contender: a minimal fair semaphore whose waiters are given
// their permits, as a yardstick for lockyard's cost against the peer's in
// the contended shapes (uncontended, its release is a script where a plain
// ZREM would do). A caller that finds a permit free and nobody in line
// takes it; any other queues (one sorted set, in order of arrival) and
// waits for its grant message; a release gives its permit to the first in
// line, in the same script, and tells that waiter on a channel of its own.
// So a contended acquisition is two scripts (the attempt that queues, 4
// calls; the release that grants, 5) and one message, against the peer's
// retries every 10 ms.
//
// It is not a semaphore to use: it has none of what lockyard's scripts do
// besides. It reads the client's clock, as the peer does (lockyard reads
// the server's, so that skewed clients keep one order); it keeps no
// waiter's liveness (a dead waiter first in line is granted a permit that
// then idles until its TTL; lockyard drops entries that lapse, and a
// polling waiter's turn); no resend of a lost reply is safe; no fencing;
// no local hand-off (every goroutine queues in Redis, where lockyard's
// leases of one process take turns at one entry); no polling waiters. A
// waiter whose grant does not come within floorRecheck asks again (its
// permit may have been granted, or it may be first in line for one that
// expired).
const floorRecheck = 200 * time.Millisecond

// The floor's steps towards lockyard (spec.Floor, cumulative), each one
// of the guarantees that lockyard's scripts keep, at the least cost that
// holds in Cluster too: 1 reads the server's clock (TIME) instead of the
// client's; 2 keeps waiters' liveness: a waiter's entry records when it
// lapses (a hash beside the queue, refreshed by an asking again), and a
// release passes over the first in line whose entry lapsed, or has none;
// 3 probes a waiter's registry before it grants (a PUBLISH whose count of
// receivers says that somebody listens), so that a grant message heard by
// nobody never leaves a permit held by nobody. (On one node the grant
// message could be its own probe, set only if heard; a Cluster node counts
// its own receivers only, and a grant that it found unheard may have been
// heard on another: lockyard sends a probe that its registries ignore.)
const floorLapse = 2 * floorRecheck

// floorAcquire: KEYS semaphore, queue, lapses; ARGV token, ttl ms, now ms
// (the client's clock), permits, 1 for a waiter asking again, step, lapse
// ms. Reply 1: the permit is the caller's; 0: queued.
var floorAcquire = redigo.NewScript(3, `
local S, Q, I, tok = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local step, now = tonumber(ARGV[6]), tonumber(ARGV[3])
if step >= 1 then
  local t = redis.call('TIME')
  now = t[1] * 1000 + t[2] / 1000
end
redis.call('ZREMRANGEBYSCORE', S, '-inf', now)
local free = tonumber(ARGV[4]) - redis.call('ZCARD', S)
local first
if ARGV[5] == '1' then
  if redis.call('ZSCORE', S, tok) then
    return 1
  end
  local r = redis.call('ZRANK', Q, tok)
  if r then -- in line: first if fewer are ahead than permits are free
    first = free > 0 and r < free
    if first then
      redis.call('ZREM', Q, tok)
      if step >= 2 then
        redis.call('HDEL', I, tok)
      end
    end
  else -- out of line (passed over, or the queue expired): as a newcomer
    first = free > 0 and redis.call('EXISTS', Q) == 0
  end
else
  first = free > 0 and redis.call('EXISTS', Q) == 0
end
if first then
  redis.call('ZADD', S, now + ARGV[2], tok)
  redis.call('PEXPIRE', S, ARGV[2])
  return 1
end
redis.call('ZADD', Q, 'NX', now, tok)
redis.call('PEXPIRE', Q, ARGV[2])
if step >= 2 then
  redis.call('HSET', I, tok, now + ARGV[7])
  redis.call('PEXPIRE', I, ARGV[2])
end
return 0
`)

// floorRelease: KEYS semaphore, queue, lapses; ARGV token, ttl ms, now
// ms, the grant channel's prefix, step. The permit goes to the first in
// line (from step 2, the first whose entry has not lapsed, of at most 8),
// told on its channel: the prefix and its token up to ':' (from step 3,
// once a probe on the prefix, 'probe:' and the same was heard). A permit
// that expired and was pruned gives nothing (a waiter asking again takes
// the free one).
var floorRelease = redigo.NewScript(3, `
local S, Q, I = KEYS[1], KEYS[2], KEYS[3]
local step, now = tonumber(ARGV[5]), tonumber(ARGV[3])
if redis.call('ZREM', S, ARGV[1]) == 0 then
  return 0 -- expired, and pruned: its place is another's already
end
if step >= 1 then
  local t = redis.call('TIME')
  now = t[1] * 1000 + t[2] / 1000
end
for _ = 1, 8 do
  local h = redis.call('ZPOPMIN', Q)[1]
  if not h then
    return 1
  end
  local live = true
  if step >= 2 then
    local lapse = redis.call('HGET', I, h)
    redis.call('HDEL', I, h)
    live = lapse and lapse + 0 > now
  end
  local ch = string.match(h, '^[^:]+')
  if live and step >= 3 then
    live = redis.call('PUBLISH', ARGV[4] .. 'probe:' .. ch, '') > 0
  end
  if live then
    redis.call('ZADD', S, now + ARGV[2], h)
    redis.call('PEXPIRE', S, ARGV[2])
    redis.call('PUBLISH', ARGV[4] .. ch, h)
    return 1
  end
end
return 1
`)

// runFloor runs one process of the floor contender: sp.Inflight loops of
// acquire, hold, release for sp.Dur, each goroutine a waiter of its own,
// and writes its report to out.
func runFloor(sp spec, out io.Writer) error {
	if sp.Mode != "loop" && sp.Mode != "" {
		return fmt.Errorf("the floor contender runs loops only, not %q", sp.Mode)
	}
	dial := func() (redigo.Conn, error) { return redigo.Dial("tcp", sp.Addr) }
	pool := &redigo.Pool{MaxIdle: sp.Inflight + 2, Dial: dial}
	defer pool.Close()
	sc, err := dial()
	if err != nil {
		return err
	}
	psc := redigo.PubSubConn{Conn: sc}
	defer psc.Close()
	prefix := "floor-grant:" + sp.Key + ":"
	ids := make([]string, sp.Inflight)
	grants := map[string]chan string{}
	var chans []any
	for g := range ids {
		ids[g] = fmt.Sprintf("p%dg%d", os.Getpid(), g)
		grants[prefix+ids[g]] = make(chan string, 1)
		chans = append(chans, prefix+ids[g], prefix+"probe:"+ids[g]) // a probe's message is dropped
	}
	if err := psc.Subscribe(chans...); err != nil {
		return err
	}
	for range chans { // every subscription confirmed before the first attempt
		switch v := psc.Receive().(type) {
		case error:
			return v
		case redigo.Subscription:
		default:
			return fmt.Errorf("floor: unexpected %T before the subscriptions", v)
		}
	}
	go func() { // ends when psc is closed
		for {
			switch v := psc.Receive().(type) {
			case error:
				return
			case redigo.Message:
				select {
				case grants[v.Channel] <- string(v.Data):
				default:
				}
			}
		}
	}()
	keys := []any{"floor:" + sp.Key, "floor:" + sp.Key + ":q", "floor:" + sp.Key + ":lapses"}
	ttl := sp.TTL.Milliseconds()
	now := func() int64 { return time.Now().UnixMilli() }
	do := func(s *redigo.Script, args ...any) (int, error) {
		c := pool.Get()
		defer c.Close()
		return redigo.Int(s.Do(c, append(keys, args...)...))
	}
	var (
		mu      sync.Mutex
		waits   []float64
		first   error
		wg      sync.WaitGroup
		holding atomic.Int64 // leases of this process that hold a permit: never more than permits
	)
	end := time.Now().Add(sp.Dur)
	for g := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			ch := grants[prefix+ids[g]]
			err := func() error {
				for n := 0; time.Now().Before(end); n++ {
					tok := fmt.Sprintf("%s:%d", ids[g], n)
					t0 := time.Now()
					select { // a late grant of an earlier turn
					case <-ch:
					default:
					}
					got, err := do(floorAcquire, tok, ttl, now(), sp.Permits, 0, sp.Floor, floorLapse.Milliseconds())
					recheck := time.NewTimer(floorRecheck) // one deadline per wait: messages for other tokens do not move it
					for err == nil && got == 0 {
						select {
						case m := <-ch:
							if m == tok {
								got = 1
							}
						case <-recheck.C:
							got, err = do(floorAcquire, tok, ttl, now(), sp.Permits, 1, sp.Floor, floorLapse.Milliseconds())
							recheck.Reset(floorRecheck)
						}
					}
					recheck.Stop()
					if err == nil && holding.Add(1) > int64(sp.Permits) {
						err = fmt.Errorf("floor: more leases of this process hold a permit than there are permits")
					}
					if err != nil {
						return err
					}
					mine = append(mine, float64(time.Since(t0).Microseconds())/1000)
					if sp.Hold > 0 {
						time.Sleep(sp.Hold)
					}
					holding.Add(-1)
					if _, err := do(floorRelease, tok, ttl, now(), prefix, sp.Floor); err != nil {
						return err
					}
					if sp.Gap > 0 {
						time.Sleep(sp.Gap)
					}
				}
				return nil
			}()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			waits = append(waits, mine...)
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return json.NewEncoder(out).Encode(report{Acquisitions: len(waits), Waits: waits})
}

// isFloor reports whether contender name is the floor's.
func isFloor(name string) bool { return strings.HasPrefix(name, "fair floor") }
