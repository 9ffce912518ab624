package core

import "time"

// MaxFreePasses bounds the hand-offs in a row that send no command: the
// next one runs the kind's pass script, which sets the TTL and gives other
// registries' waiters their turn.
const MaxFreePasses = 8

// Run is a run of local holds of one key: the hold passes from one local
// holder to the next (a lock's goroutines, a semaphore's leases) without
// the key leaving Redis. Its owner (the holder that hands over) alone
// reads and writes it.
type Run struct {
	Since   int64 // registry clock: the key was obtained, and the run began
	LastCmd int64 // registry clock: the last command on the hold was sent
	Passes  int   // free passes since the last command
}

// Begin starts a run at sent, the send time of the obtain.
func (r *Run) Begin(sent int64) { *r = Run{Since: sent, LastCmd: sent} }

// Sent records a command on the hold (a pass that kept the key), sent at
// sent: the free passes count again from there.
func (r *Run) Sent(sent int64) { r.LastCmd, r.Passes = sent, 0 }

// Bounded reports whether the run has lasted span at now: it ends, and
// the key is released to anyone.
func (r *Run) Bounded(now int64, span time.Duration) bool { return now-r.Since >= int64(span) }

// ReleaseInstead reports whether a pass that failed with err is better
// followed by a release, at once and retried, than left to a release in
// the background: most likely a pooled connection that the server closed
// (the pass may have run: the release says so, Hold.ReleaseErr), or an
// error reply after which the pass did not run (TRYAGAIN while a Cluster
// slot migrates splits the pass's keys between two nodes; the release
// needs the key alone). The same rule for every kind.
func ReleaseInstead(err error) bool {
	return IsStaleConn(err) || err != nil && !IsAmbiguous(err) && IsTransient(err)
}

// FreePass reports whether h, valid at now, may pass to the next local
// holder, which asked for a TTL of next, with no command at all, and
// counts the pass if so: without fencing (each holder needs a new token),
// within an unbounded run, fewer than MaxFreePasses since the last command
// and within freeSpan of it, for the TTL h has, with at least three
// quarters of it left. The next holder then inherits h, its token and its
// fence. The rule is the same for every kind.
func (r *Run) FreePass(h *Hold, next time.Duration, now int64, freeSpan time.Duration, fenced, bounded bool) bool {
	if fenced || bounded || r.Passes >= MaxFreePasses || now-r.LastCmd >= int64(freeSpan) ||
		h.TTL() != next || h.Deadline.Load()-now < int64(next*3/4) {
		return false
	}
	r.Passes++
	return true
}
