package core

import (
	"testing"
	"time"
)

// A Crowd expects nobody until waiters are found, then for the memory
// after the last time they were, unless a later report found them again.
func TestCrowd(t *testing.T) {
	const mem = time.Second
	var c Crowd
	if !c.Quiet(0, mem) {
		t.Fatal("the zero Crowd expects waiters")
	}
	c.Found(true, 100)
	if c.Quiet(100+int64(2*mem), mem) {
		t.Fatal("quiet while the last report found waiters")
	}
	c.Found(false, 200)
	if c.Quiet(200, mem) || c.Quiet(100+int64(mem)-1, mem) {
		t.Fatal("quiet within the memory of waiters found")
	}
	if !c.Quiet(100+int64(mem), mem) {
		t.Fatal("not quiet once the memory passed")
	}
	c.Found(true, 0) // a clock at 0 still counts as found
	c.Found(false, 0)
	if c.Quiet(int64(mem)-1, mem) {
		t.Fatal("quiet within the memory of waiters found at time 0")
	}
	if !c.Quiet(1, 0) {
		t.Fatal("not quiet without memory")
	}
}
