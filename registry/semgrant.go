package registry

import (
	"strconv"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// Permits granted by a script. A listener's refused attempt leaves a grant
// record in its entry in line (semacquire.lua, ARGV[18]): when its turn
// comes, the script that gives the turn sets a permit itself and tells the
// registry on its turn channel (prelude.lua, deliver), so that the waiter
// need not try again: one request fewer for each turn. A record stands for
// a run of grant numbers, one for the waiting lease and one for each lease
// of the registry behind it (each grant queues the instance again for the
// next, as an attempt granted the last free permit while more leases wait
// does). A grant's permit has the registry's grant token of its number
// (wire.GrantToken), which the attempt that recorded it takes as its own
// token too, so that a resent attempt finds the permit granted to its first
// run, as it finds one its first run took. The instance remembers its last
// records (grantBook) and makes each permit granted a spare for its
// waiting leases (granted), valid for the TTL from when the attempt was
// sent: the permit was set later, when the script ran. A grant whose
// message was lost is claimed by the next attempt (semacquire.lua,
// ARGV[19]); one for a number that no instance remembers is given back.

// grantRecords is how many records an instance remembers: the line keeps
// the last one, and grants of those before it may still be on their way.
const grantRecords = 8

// maxGrantRun bounds the run of grants one record stands for: the waiting
// lease and at most maxGrantRun-1 behind it.
const maxGrantRun = 16

// grantRecord is the run of grant numbers seq to seq+n-1 that an attempt
// sent at sent (registry clock) recorded, for permits of TTL ttl.
type grantRecord struct {
	seq, n uint64
	sent   int64
	ttl    time.Duration
	given  uint64 // the numbers this instance got the permits of, a bit each from seq
	// permits are those installed for them, to tell whether a number
	// granted twice (a resent attempt that recorded an old run again) is
	// still held.
	permits [maxGrantRun]*permit
}

// grantBook is a ring of an instance's last records (under its mu).
type grantBook struct {
	recs [grantRecords]grantRecord
	at   int
}

// find returns the record whose run holds number seq, or nil.
func (b *grantBook) find(seq uint64) *grantRecord {
	for i := range b.recs {
		if x := &b.recs[i]; x.n > 0 && seq >= x.seq && seq < x.seq+x.n {
			return x
		}
	}
	return nil
}

// asksGrants reports whether the instance's attempts ask for grants: a
// PubSubLock instance that hears its turns, while the registry's turn
// subscriber listens on its own channels (a subscriber to every
// registry's, the fallback of an ACL that refuses its own, hears no probe:
// wire.Layout.ProbeChannel).
func (s *Semaphore) asksGrants(deaf bool) bool {
	t := s.eng.turns
	return s.pubsub && !deaf && t.own.Load() && t.up.Load()
}

// grantRecordArg returns the first number, the token and the grant record
// (semacquire.lua's ARGV[18]) of an attempt sent at sent for a TTL of ttl
// while needers leases wait, and remembers the record before it is sent:
// the grant's message may come before the attempt's reply.
func (s *Semaphore) grantRecordArg(sent int64, ttl time.Duration, needers int) (uint64, string, string) {
	r := s.eng
	s.mu.Lock()
	more := uint64(min(max(needers-1, 0), maxGrantRun-1))
	n := more + 1
	seq := r.grantSeq.Add(n) - n + 1
	b := &s.grants
	b.recs[b.at] = grantRecord{seq: seq, n: n, sent: sent, ttl: ttl}
	b.at = (b.at + 1) % grantRecords
	s.mu.Unlock()
	fenced := "0"
	if r.cfg.fencing {
		fenced = "1"
	}
	return seq, wire.GrantToken(r.core.ClientID, seq, s.count), wire.GrantTokenPrefix(r.core.ClientID) + " " + s.count + " " +
		strconv.FormatInt(ttl.Milliseconds(), 10) + " " + strconv.FormatUint(seq, 10) + " " + strconv.FormatUint(more, 10) + " " +
		strconv.FormatInt(max(1, r.cfg.idle.Milliseconds()), 10) + " " + fenced
}

// claimArg returns the number and token of the permit that the instance's
// last record would be granted next (semacquire.lua's ARGV[19]), if any:
// the next attempt claims it, in case its grant message was lost. Grants
// of a run come in order, so a lost one is the first not yet got.
func (s *Semaphore) claimArg() (uint64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, k := s.grants.next()
	if x == nil {
		return 0, ""
	}
	return x.seq + k, wire.GrantToken(s.eng.core.ClientID, x.seq+k, s.count)
}

// next returns the latest record and the place in its run of the number
// it would be granted next, or nil.
func (b *grantBook) next() (*grantRecord, uint64) {
	x := &b.recs[(b.at+grantRecords-1)%grantRecords]
	for k := uint64(0); k < x.n; k++ {
		if x.given&(1<<k) == 0 {
			return x, k
		}
	}
	return nil, 0
}

// markGot records that the instance got number seq, its permit p (nil:
// given back), unless it had got it already, and reports whether it had.
func (s *Semaphore) markGot(seq uint64, p *permit) (had bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.grants.find(seq)
	if x == nil {
		return false
	}
	k := seq - x.seq
	if x.given&(1<<k) != 0 {
		return true
	}
	x.given |= 1 << k
	x.permits[k] = p
	if s.leftClaim == seq {
		s.leftClaim = 0
	}
	return false
}

// dropGrant marks number seq (0: none) as got and given back, unless the
// instance got it already (a grant came first), and reports whether it did
// so: the caller then gives its permit back, and a grant of it that comes
// later is given back too (granted: got, no permit). An attempt whose
// outcome is unknown drops its number and its claim.
func (s *Semaphore) dropGrant(seq uint64) bool { return seq != 0 && !s.markGot(seq, nil) }

// grantCameFirst reports whether a grant of attempt seq's first number
// came before the attempt's reply.
func (s *Semaphore) grantCameFirst(seq uint64) bool {
	if seq == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.grants.find(seq)
	return x != nil && x.given&1 != 0
}

// claimable returns the token of the permit that a grant whose message was
// lost may hold (the number the next attempt would claim, marked given up
// so that its grant message, if it comes, is given back too), or "". The
// caller holds mu.
func (s *Semaphore) claimable() string {
	x, k := s.grants.next()
	s.leftClaim = 0
	if x == nil {
		return ""
	}
	x.given |= 1 << k
	x.permits[k] = nil
	return wire.GrantToken(s.eng.core.ClientID, x.seq+k, s.count)
}

// took records that the instance got the permit of number seq (0: none)
// by an attempt, p, and reports whether a grant of it came first: then it
// is a spare of the instance's already (granted), and p is not to be used.
func (s *Semaphore) took(seq uint64, p *permit) bool { return seq != 0 && s.markGot(seq, p) }

// granted takes the permit that a script granted for g.Seq, with fencing
// token g.Fence (turn subscriber): a spare for the leases that wait
// (give), or given back if none does (they gave up). A grant that left the
// instance queued for more (its run goes on) leaves the next head to wait
// for the next grant, at most a poll interval (grantWait). A number the
// instance got already by an attempt is left to that attempt's permit,
// one it gave up is given back, and one it does not remember too. A grant
// valid for less than two thirds of its TTL by the registry's count is
// left to the next attempt's claim if it is the number claimed next, and
// given back if not.
func (s *Semaphore) granted(g wire.Grant) {
	r := s.eng
	now := r.core.Now()
	token := wire.GrantToken(r.core.ClientID, g.Seq, s.count)
	s.mu.Lock()
	x := s.grants.find(g.Seq)
	if x == nil {
		s.mu.Unlock()
		r.core.Log.Warn("lockyard: a semaphore permit was granted for an attempt this registry no longer remembers; it is given back", "key", s.key)
		s.releaseLater(token)
		return
	}
	k := g.Seq - x.seq
	if x.given&(1<<k) != 0 {
		// Got already: by an attempt (a claim or a resend that found the
		// permit before this message came), whose permit's leases give it
		// back as theirs; or given up (dropGrant: no permit), and given
		// back now. Never by whether that permit is still held: a pass or
		// a release retires its hold while it runs.
		dropped := x.permits[k] == nil
		s.mu.Unlock()
		if dropped {
			s.releaseLater(token)
		}
		return
	}
	if x == &s.grants.recs[(s.grants.at+grantRecords-1)%grantRecords] {
		// The latest record: the line holds the instance as its grant left
		// it (an older record's grant says nothing of a later attempt's).
		more := g.Seq+1 < x.seq+x.n // the script queued the instance again for the run's next grant
		s.queued = more
		s.queuedAt++
		s.grantWait = 0
		if more {
			s.grantWait = now + int64(r.cfg.idle)
		}
	}
	deadline := core.ValidUntil(x.sent, x.ttl)
	waiting := s.needers > 0
	if deadline-now < int64(x.ttl)*2/3 {
		// Valid for less than two thirds of its TTL by this registry's
		// count (the attempt that recorded it was sent long before): a
		// lease would get a sliver of it, lost before the watchdog's first
		// renewal. The number the next attempt claims is left to it, woken
		// at once: the claim gets the permit with a TTL from then.
		if nx, nk := s.grants.next(); waiting && nx == x && nk == k {
			s.leftClaim = g.Seq
			s.mu.Unlock()
			s.signal(core.EveryTurn)
			return
		}
	}
	x.given |= 1 << k
	rec := *x
	var p *permit
	if deadline-now >= int64(rec.ttl)*2/3 {
		// Its run of local holds starts now: the grant was its last command.
		p = &permit{s: s, run: core.Run{Since: now, LastCmd: now}}
		x.permits[k] = p
	}
	s.mu.Unlock()
	if p == nil {
		s.releaseLater(token) // not the next to claim: given back
		if waiting {
			s.signal(core.EveryTurn) // its turn is gone with it: the head tries at once
		}
		return
	}
	s.install(p, core.NewHold(&r.core, s.key, token, g.Fence, rec.ttl, deadline, p, s.proto))
	if s.give(p) != handedOver {
		p.h.Load().Retire()
		s.releaseLater(token)
	}
}

// granted hands a grant heard by the turn subscriber to the cached
// semaphore or read-write lock it is for (Permits 0: rwgrant.go); one
// whose instance is not cached (evicted after its waiters gave up) is
// given back.
func (r *Registry) granted(g wire.Grant) {
	name, ok := r.layout.UserKey(g.Key)
	if !ok || r.sem == nil {
		return
	}
	if g.Permits == 0 {
		if e, ok := r.cache.peek(name); ok {
			if l, ok := e.(*RWLock); ok {
				l.granted(g)
				return
			}
		}
		newRWLock(&r.engine, r.rw, name).releaseLater(wire.GrantToken(r.core.ClientID, g.Seq, ""))
		return
	}
	if e, ok := r.cache.peek(name); ok {
		if s, ok := e.(*Semaphore); ok && s.permits == g.Permits {
			s.granted(g)
			return
		}
	}
	newSemaphore(&r.engine, r.sem, name, g.Permits).releaseLater(wire.GrantToken(r.core.ClientID, g.Seq, wire.CountSuffix(g.Permits)))
}
