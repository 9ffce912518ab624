package registry

import (
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// A permit granted by a script. A listener's refused attempt leaves a
// grant record in its entry in line (semacquire.lua, ARGV[18]): its token,
// TTL and number. When its turn comes, the script that gives the turn
// sets the permit for that token itself and tells the registry on its turn
// channel (prelude.lua, deliver), so that the waiter need not try again:
// one request fewer for each turn. The instance remembers its last
// attempts (grantBook), and makes the permit a spare for its waiting
// leases (granted), valid for the attempt's TTL from when the attempt was
// sent: the permit was set later, when the script ran.

// grantRecords is how many attempts an instance remembers: the line keeps
// the last refused one's record, and grants of those before it may still
// be on their way.
const grantRecords = 8

// grantState is what became of an attempt that a script may grant a
// permit to.
type grantState uint8

const (
	grantNone    grantState = iota // not remembered (or not one of them)
	grantWaiting                   // sent, refused, or not answered yet
	grantGiven                     // a script granted it the permit, now a spare (granted)
	grantTaken                     // the attempt took a permit itself (a resend that found it granted)
	grantDropped                   // the attempt's outcome is unknown: a grant is given back
)

// grantRecord is an attempt that a script may grant a permit to: its
// number, token, when it was sent (registry clock) and TTL.
type grantRecord struct {
	seq   uint64
	token string
	sent  int64
	ttl   int64 // ns
	state grantState
}

// grantBook is a ring of an instance's last attempts (under its mu).
type grantBook struct {
	recs [grantRecords]grantRecord
	at   int
}

// expectGrant remembers an attempt before it is sent (the grant's message
// may come before its reply), and returns its number.
func (s *Semaphore) expectGrant(token string, sent int64, ttl time.Duration) uint64 {
	seq := s.eng.grantSeq.Add(1)
	s.mu.Lock()
	b := &s.grants
	b.recs[b.at] = grantRecord{seq: seq, token: token, sent: sent, ttl: int64(ttl), state: grantWaiting}
	b.at = (b.at + 1) % grantRecords
	s.mu.Unlock()
	return seq
}

// settleGrant records the outcome of attempt seq (0: none) unless a grant
// came first, and returns its state before.
func (s *Semaphore) settleGrant(seq uint64, to grantState) grantState {
	if seq == 0 {
		return grantNone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.grants.recs {
		if x := &s.grants.recs[i]; x.seq == seq {
			was := x.state
			if was == grantWaiting {
				x.state = to
			}
			return was
		}
	}
	return grantNone
}

// granted takes the permit that a script granted to attempt seq, with
// fencing token fence (turn subscriber): a spare for the leases that wait
// (give), or given back if none does, or the attempt was given up
// (grantDropped). One the attempt took itself is its lease's already.
func (s *Semaphore) granted(seq uint64, fence int64) {
	r := s.eng
	s.mu.Lock()
	var rec grantRecord
	for i := range s.grants.recs {
		if x := &s.grants.recs[i]; x.seq == seq {
			rec = *x
			if x.state == grantWaiting {
				x.state = grantGiven
			}
			break
		}
	}
	if rec.state == grantWaiting {
		s.queued = false // the script took the entry out of line
		s.queuedAt++
	}
	s.mu.Unlock()
	switch rec.state {
	case grantNone:
		r.core.Log.Warn("lockyard: a semaphore permit was granted to an attempt this registry no longer remembers; it is held until its TTL", "key", s.key)
		return
	case grantTaken:
		return
	case grantDropped:
		s.releaseLater(rec.token)
		return
	}
	ttl := time.Duration(rec.ttl)
	deadline, now := core.ValidUntil(rec.sent, ttl), r.core.Now()
	if now >= deadline {
		s.releaseLater(rec.token)
		return
	}
	// Its run of local holds starts now: the grant was its last command.
	p := &permit{s: s, run: core.Run{Since: now, LastCmd: now}}
	s.install(p, core.NewHold(&r.core, s.key, rec.token, fence, ttl, deadline, p, s.proto))
	if s.give(p) != handedOver {
		p.h.Load().Retire()
		s.releaseLater(rec.token)
	}
}
