package main

import (
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
	redistest.MustNil(t, psc.Subscribe("g:b", "g:c", "g:probe:c")) // b is not probed: its registry is deaf
	for range 3 {
		if _, ok := psc.Receive().(redigo.Subscription); !ok {
			t.Fatal("no subscription")
		}
	}
	for step := range 4 {
		keys := []any{"s", "s:q", "s:i"}
		_, err := c.Do("DEL", keys...)
		redistest.MustNil(t, err)
		now := time.Now().UnixMilli()
		acquire := func(tok string, again int) int {
			n, err := redigo.Int(floorAcquire.Do(c, append(keys, tok, 2000, now, 2, again, step, 400)...))
			redistest.MustNil(t, err)
			return n
		}
		release := func(tok string) {
			_, err := floorRelease.Do(c, append(keys, tok, 2000, now, "g:", step)...)
			redistest.MustNil(t, err)
		}
		holds := func(tok string) bool {
			s, err := c.Do("ZSCORE", "s", tok)
			redistest.MustNil(t, err)
			return s != nil
		}
		// A permit free while somebody is in line is theirs: a newcomer
		// queues, and a waiter asking again takes one only if fewer are
		// ahead of it than permits are free.
		_, err = c.Do("ZADD", "s:q", now-10, "w:1")
		redistest.MustNil(t, err)
		if acquire("a:0", 1) != 1 || acquire("n:1", 0) != 0 || acquire("n:1", 1) != 0 {
			t.Fatalf("step %d: a caller behind the first in line took its permit", step)
		}
		if acquire("w:1", 1) != 1 {
			t.Fatalf("step %d: the first in line, asking again, did not take the free permit", step)
		}
		_, err = c.Do("DEL", keys...)
		redistest.MustNil(t, err)
		if acquire("a:1", 0) != 1 || acquire("x:1", 0) != 1 {
			t.Fatalf("step %d: two free permits not taken", step)
		}
		if acquire("b:1", 0) != 0 || acquire("c:1", 0) != 0 {
			t.Fatalf("step %d: a full semaphore admitted a caller", step)
		}
		release("a:1") // to b, first in line: told unless its registry is deaf (step 3)
		if step < 3 {
			if !holds("b:1") || holds("c:1") {
				t.Fatalf("step %d: the release did not give its permit to the first in line", step)
			}
			m, ok := psc.Receive().(redigo.Message)
			if !ok || m.Channel != "g:b" || string(m.Data) != "b:1" {
				t.Fatalf("step %d: grant message %v, want b:1 on g:b", step, m)
			}
			release("b:1")
		}
		// c is granted now: at step 3 b, unheard, was passed over.
		if !holds("c:1") {
			t.Fatalf("step %d: c was not granted", step)
		}
		if step == 3 {
			if m, ok := psc.Receive().(redigo.Message); !ok || m.Channel != "g:probe:c" {
				t.Fatalf("step 3: no probe before the grant: %v", m)
			}
		}
		if m, ok := psc.Receive().(redigo.Message); !ok || m.Channel != "g:c" || string(m.Data) != "c:1" {
			t.Fatalf("step %d: grant message %v, want c:1 on g:c", step, m)
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
		if step >= 2 { // a waiter whose entry lapsed is passed over
			_, err = c.Do("HSET", "s:i", "e:1", now-1)
			redistest.MustNil(t, err)
			release("d:1")
			if holds("e:1") {
				t.Fatalf("step %d: a lapsed waiter was granted a permit", step)
			}
		}
		// A waiter that asks again takes the permit it is first in line for.
		if step < 2 && acquire("e:1", 1) != 0 {
			t.Fatalf("step %d: e was admitted with every permit held", step)
		}
		if step < 2 {
			release("d:1")
			if !holds("e:1") {
				t.Fatalf("step %d: e, first in line, was not granted", step)
			}
		}
	}
}
