package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// The floor is a yardstick only if it is a fair semaphore: a caller finds
// a permit free only with nobody in line, a release gives its permit to
// the first in line and tells it on its channel, and each step keeps the
// guarantee it is named for.
func TestFloorScripts(t *testing.T) {
	srv, err := redistest.Start()
	redistest.MustNil(t, err)
	defer srv.Close()
	c, err := redigo.Dial("tcp", srv.Addr)
	redistest.MustNil(t, err)
	defer c.Close()
	sub, err := redigo.Dial("tcp", srv.Addr)
	redistest.MustNil(t, err)
	defer sub.Close()
	psc := redigo.PubSubConn{Conn: sub}
	chans := []any{"g:b", "g:c", "g:probe:c", "g:f", "g:probe:f"} // b is not probed: its registry is deaf
	redistest.MustNil(t, psc.Subscribe(chans...))
	for range chans {
		if _, ok := psc.Receive().(redigo.Subscription); !ok {
			t.Fatal("no subscription")
		}
	}
	message := func(step int, ch, data string) {
		t.Helper()
		m, ok := psc.Receive().(redigo.Message)
		if !ok || m.Channel != ch || data != "" && string(m.Data) != data {
			t.Fatalf("step %d: message %v, want %q on %s", step, m, data, ch)
		}
	}
	serverNow := func() int64 {
		v, err := redigo.Int64s(c.Do("TIME"))
		redistest.MustNil(t, err)
		return v[0]*1000 + v[1]/1000
	}
	for step := range 4 {
		keys := []any{"s", "s:q", "s:i"}
		_, err := c.Do("DEL", keys...)
		redistest.MustNil(t, err)
		// From step 1 on the scripts read the server's clock: the client's
		// is given as 0, which a script that used it would prune by and
		// score permits with.
		now, arg := serverNow(), int64(0)
		if step == 0 {
			arg = now
		}
		acquire := func(tok string, again int) int {
			t.Helper()
			n, err := redigo.Int(floorAcquire.Do(c, append(keys, tok, 2000, arg, 2, again, step, 400)...))
			redistest.MustNil(t, err)
			return n
		}
		release := func(tok string) {
			t.Helper()
			_, err := floorRelease.Do(c, append(keys, tok, 2000, arg, "g:", step)...)
			redistest.MustNil(t, err)
		}
		holds := func(tok string) bool {
			t.Helper()
			s, err := c.Do("ZSCORE", "s", tok)
			redistest.MustNil(t, err)
			return s != nil
		}
		inLine := func(tok string) bool {
			t.Helper()
			r, err := c.Do("ZRANK", "s:q", tok)
			redistest.MustNil(t, err)
			return r != nil
		}

		// A permit free while somebody is in line is theirs: a newcomer
		// queues, and a waiter asking again takes one only if fewer are
		// ahead of it than permits are free; one out of line asks as a
		// newcomer.
		if acquire("a:0", 0) != 1 {
			t.Fatalf("step %d: a free permit with nobody in line was not taken", step)
		}
		if s, err := redigo.Float64(c.Do("ZSCORE", "s", "a:0")); err != nil || s < float64(now+1000) || s > float64(now+3000) {
			t.Fatalf("step %d: the permit expires at %.0f, want the clock %d and its TTL of 2000 ms (%v)", step, s, now, err)
		}
		_, err = c.Do("ZADD", "s:q", now-10, "w:1")
		redistest.MustNil(t, err)
		if acquire("n:1", 0) != 0 || acquire("n:1", 1) != 0 || acquire("z:1", 1) != 0 {
			t.Fatalf("step %d: a caller behind the first in line took its permit", step)
		}
		if acquire("w:1", 1) != 1 || inLine("w:1") {
			t.Fatalf("step %d: the first in line, asking again, did not take the free permit and leave the line", step)
		}
		_, err = c.Do("DEL", keys...)
		redistest.MustNil(t, err)

		if acquire("a:1", 0) != 1 || acquire("x:1", 0) != 1 {
			t.Fatalf("step %d: two free permits not taken", step)
		}
		if acquire("b:1", 0) != 0 || acquire("c:1", 0) != 0 {
			t.Fatalf("step %d: a full semaphore admitted a caller", step)
		}
		release("a:1") // to b, first in line, unless its registry is deaf (step 3)
		if step < 3 {
			if !holds("b:1") || holds("c:1") || inLine("b:1") {
				t.Fatalf("step %d: the release did not give its permit to the first in line", step)
			}
			message(step, "g:b", "b:1")
			release("b:1")
		} else if holds("b:1") || inLine("b:1") {
			t.Fatalf("step 3: b, whose registry did not hear the probe, holds a permit or is still in line")
		}
		if !holds("c:1") {
			t.Fatalf("step %d: c was not granted", step)
		}
		if step == 3 {
			message(step, "g:probe:c", "")
		}
		message(step, "g:c", "c:1")
		// A waiter whose grant message was lost, asking again, has it.
		if acquire("c:1", 1) != 1 {
			t.Fatalf("step %d: a granted waiter asking again was refused", step)
		}

		// A release of a permit that expired and was pruned gives nothing.
		_, err = c.Do("ZADD", "s", now-1, "c:1")
		redistest.MustNil(t, err)
		if acquire("d:1", 0) != 1 || acquire("e:1", 0) != 0 {
			t.Fatalf("step %d: the expired permit was not free, or a full one was", step)
		}
		release("c:1")
		if holds("e:1") {
			t.Fatalf("step %d: a release of a pruned permit granted one", step)
		}
		if step < 2 { // e, first in line, is granted the next permit
			release("d:1")
			if !holds("e:1") {
				t.Fatalf("step %d: e, first in line, was not granted", step)
			}
			continue
		}
		// Liveness: asking again refreshes a waiter's lapse; a release
		// passes over a waiter whose entry lapsed, or has none, and gives
		// the permit to the next live one.
		_, err = c.Do("HSET", "s:i", "e:1", now-1)
		redistest.MustNil(t, err)
		if acquire("e:1", 1) != 0 {
			t.Fatalf("step %d: e was admitted with every permit held", step)
		}
		if lapse, err := redigo.Float64(c.Do("HGET", "s:i", "e:1")); err != nil || lapse <= float64(now) {
			t.Fatalf("step %d: asking again left e's lapse at %.0f (%v)", step, lapse, err)
		}
		_, err = c.Do("HSET", "s:i", "e:1", now-1)
		redistest.MustNil(t, err)
		_, err = c.Do("ZADD", "s:q", now-5, "y:1") // in line without a lapse, ahead of e and f
		redistest.MustNil(t, err)
		if acquire("f:1", 0) != 0 {
			t.Fatalf("step %d: f was admitted with every permit held", step)
		}
		release("d:1")
		if holds("e:1") || holds("y:1") || !holds("f:1") {
			t.Fatalf("step %d: the permit did not pass over the lapsed waiters to f", step)
		}
		if step == 3 {
			message(step, "g:probe:f", "")
		}
		message(step, "g:f", "f:1")
	}
}

// A floor process runs its loops to the end, its leases never holding more
// permits than there are (runFloor fails if they do), and reports every
// acquisition.
func TestFloorRun(t *testing.T) {
	srv, err := redistest.Start()
	redistest.MustNil(t, err)
	defer srv.Close()
	for step := range 4 {
		var out bytes.Buffer
		sp := spec{Addr: srv.Addr, Key: "run", Permits: 2, Inflight: 6, Dur: 300 * time.Millisecond, Hold: time.Millisecond, TTL: 2 * time.Second, Floor: step}
		redistest.MustNil(t, runFloor(sp, &out))
		var r report
		redistest.MustNil(t, json.Unmarshal(out.Bytes(), &r))
		if r.Acquisitions < 20 || len(r.Waits) != r.Acquisitions {
			t.Fatalf("step %d: %d acquisitions, %d waits: want at least 20, one wait each", step, r.Acquisitions, len(r.Waits))
		}
	}
}
