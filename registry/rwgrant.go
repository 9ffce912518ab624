package registry

import (
	"strconv"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// Holds granted by a script. A listening head's refused attempt leaves a
// grant record in its instance's entry in line (rwacquire.lua, ARGV[15]):
// when the entry's turn comes, the script that gives it (a release, a
// leave, a nudge, a downgrade, another's attempt) takes the side the entry
// waits for itself and tells the registry on its turn channel
// (rwrules.lua, deliver), so that the head need not try again: a round
// trip fewer at each hand-over, from a writer to the readers behind it and
// from the last reader to the writer. The record stands for one token,
// the entry's grant token (wire.GrantToken of its number), which every
// attempt of the entry takes: whichever of the grant and an attempt comes
// first gives the head the hold, and a grant whose message was lost is
// found by the next attempt, which gets the hold its token has
// (rwacquire.lua, the record's claim), as a resent attempt gets the one its
// first run took. Each record names its attempt, and the grant message
// the attempt whose record it found: the hold is valid for that attempt's
// TTL from when it was sent (the script set it later). A grant valid for
// less than two thirds of that TTL by then is left to the head's next
// attempt, woken at once, which gets the hold for a TTL from then. An
// entry that leaves the line with its number not got (its leases gave up)
// gives that token back once it has left, and a grant of a number the
// instance does not know, or gave up, is given back too.

// rwGrantNo is the grant number of an RWLock instance's entry in line
// (under l.mu).
type rwGrantNo struct {
	seq   uint64        // 0: none
	entry string        // the entry it was recorded for
	first int64         // when the first attempt that recorded it was sent (registry clock)
	ttl   time.Duration // the shortest TTL recorded
	last  int64         // when the last attempt that recorded it was sent
	got   bool          // its hold was got, by an attempt or a grant
	// tries are the last attempts that recorded it, by their number in
	// the record (a ring at tries[n%len]): a grant names the attempt whose
	// record it found, and its hold lives that attempt's TTL from after
	// it was sent.
	n     uint64
	tries [8]struct {
		n    uint64
		sent int64
		ttl  time.Duration
	}
	// hold is the hold granted for it, until a head takes it.
	hold *rwHold
}

// rwGotNumbers is how many numbers got an instance remembers: a grant of
// one of them that comes later (an attempt found the grant's hold first,
// or a resent attempt recorded it again) is left to the hold got.
const rwGotNumbers = 8

// asksGrants reports whether the instance's head asks for grants: as a
// Semaphore's (asksGrants).
func (l *RWLock) asksGrants(deaf bool) bool {
	t := l.eng.turns
	return l.pubsub && !deaf && t.own.Load() && t.up.Load()
}

// grantToken returns the token that number seq grants.
func (l *RWLock) grantToken(seq uint64) string { return wire.GrantToken(l.eng.core.ClientID, seq, "") }

// grantArgs returns the number, token, grant record (rwacquire.lua's
// ARGV[15]; "" when the instance asks for no grants) and claim flag
// (ARGV[16]) of an attempt of entry sent at sent for a TTL of ttl: the
// entry's number, a new one if it has none and asks (asks); with none and
// not asking, 0 and a new plain token. An entry whose number a grant may
// have given a hold (not got yet) keeps taking its token, whether or not
// it asks, so that its attempt finds that hold: a grant's message is lost
// when the turn subscription breaks, and the instance then asks for none.
func (l *RWLock) grantArgs(entry string, sent int64, ttl time.Duration, asks bool) (seq uint64, token, record string, claim bool) {
	r := l.eng
	l.mu.Lock()
	g := &l.grant
	if g.seq != 0 && (g.entry != entry || g.got && g.hold == nil) {
		*g = rwGrantNo{} // got (its hold is a lease's), or another side's entry (given back by wait)
	}
	if g.got { // a grant's hold, installed since the head looked (Waiting.Local): the attempt gets it
		seq, token = g.seq, l.grantToken(g.seq)
		l.mu.Unlock()
		return seq, token, "", true
	}
	if g.seq == 0 {
		if !asks {
			l.mu.Unlock()
			return 0, r.core.NewToken(), "", false
		}
		*g = rwGrantNo{seq: r.grantSeq.Add(1), entry: entry, first: sent, ttl: ttl}
	}
	seq, token = g.seq, l.grantToken(g.seq)
	if !asks {
		l.mu.Unlock()
		return seq, token, "", true
	}
	g.n++
	t := &g.tries[g.n%uint64(len(g.tries))]
	t.n, t.sent, t.ttl = g.n, sent, ttl
	g.last, g.ttl = sent, min(g.ttl, ttl)
	n := g.n
	l.mu.Unlock()
	fenced := "0"
	if r.cfg.fencing {
		fenced = "1"
	}
	return seq, token, wire.GrantTokenPrefix(r.core.ClientID) + " " + strconv.FormatUint(seq, 10) + " " +
		strconv.FormatInt(ttl.Milliseconds(), 10) + " " + fenced + " " + strconv.FormatUint(n, 10), true
}

// validity returns the deadline of the hold that a grant found in the
// record of attempt n: its TTL from when it was sent; for an attempt
// not remembered (a resend that recorded an old one again), the
// shortest TTL recorded from the first attempt. The caller holds mu.
func (g *rwGrantNo) validity(n uint64) (int64, time.Duration) {
	if t := g.tries[n%uint64(len(g.tries))]; n > 0 && t.n == n {
		return core.ValidUntil(t.sent, t.ttl), t.ttl
	}
	return core.ValidUntil(g.first, g.ttl), g.ttl
}

// remember records that the instance got the hold of number seq: a grant
// of it that comes later is left to that hold. The caller holds mu.
func (l *RWLock) remember(seq uint64) {
	l.gotSeqs[l.gotAt] = seq
	l.gotAt = (l.gotAt + 1) % rwGotNumbers
}

// tookGrant records that an attempt got the hold of number seq: the
// attempt's reply, which ran after any grant of it (and renewed it, with
// a new fencing token), makes the head's hold. A hold a grant installed
// first is dropped (not given back: it is the same hold in Redis).
func (l *RWLock) tookGrant(seq uint64) {
	l.mu.Lock()
	l.remember(seq)
	var stale *rwHold
	if g := &l.grant; g.seq == seq {
		stale = g.hold
		*g = rwGrantNo{}
	}
	l.mu.Unlock()
	if stale != nil {
		stale.h.Retire()
	}
}

// takeGranted returns the hold a grant installed for the instance's
// entry, for a head whose TTL is ttl, if there is one that is valid for
// two thirds of ttl yet (as join asks of a shared hold). One that is not
// is dropped, its number kept: the head's next attempt, with its token,
// gets that hold with its own TTL.
func (l *RWLock) takeGranted(ttl time.Duration) *rwHold {
	now := l.eng.core.Now()
	l.mu.Lock()
	g := &l.grant
	p := g.hold
	if p == nil {
		l.mu.Unlock()
		return nil
	}
	if p.h.Lost(now) || p.h.Deadline.Load()-now < int64(ttl)*2/3 {
		g.hold, g.got = nil, false
		l.mu.Unlock()
		p.h.Retire()
		return nil
	}
	*g = rwGrantNo{}
	l.useGranted(p)
	l.mu.Unlock()
	return p
}

// hasGranted reports whether a grant's hold waits for the head.
func (l *RWLock) hasGranted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant.hold != nil
}

// useGranted makes p, a grant's hold, the head's: a read hold becomes the
// registry's, which new readers join, as an attempt's does. The caller
// holds mu.
func (l *RWLock) useGranted(p *rwHold) {
	p.users = 1
	if !p.write && !l.proto.s.fencing {
		l.shared = p
	}
}

// granted takes the hold that a script granted for g.Seq (turn
// subscriber): the head's, which it wakes. A number the instance got
// already is left to its hold; one that is not its entry's (given up, or
// unknown) is given back. A grant whose hold would be valid for less than
// two thirds of its TTL by the instance's count (the attempt whose record
// it found was sent long before) is left to the head's next attempt,
// which it wakes at once: with the number's token, that attempt gets the
// hold with a TTL from now. The number stays the entry's, so that its
// leases giving up give the hold back.
func (l *RWLock) granted(g wire.Grant) {
	r := l.eng
	now := r.core.Now()
	token := l.grantToken(g.Seq)
	l.mu.Lock()
	n := &l.grant
	if n.seq == g.Seq && n.got {
		l.mu.Unlock() // granted again (a resent attempt recorded it again): the same hold
		return
	}
	for _, s := range l.gotSeqs {
		if s == g.Seq {
			l.mu.Unlock()
			return
		}
	}
	if n.seq != g.Seq {
		l.mu.Unlock()
		l.releaseLater(token)
		return
	}
	if l.queued == n.entry {
		l.queued = "" // the grant took the entry out of line
	}
	deadline, ttl := n.validity(g.Attempt)
	if deadline-now < int64(ttl)*2/3 {
		l.mu.Unlock()
		l.wake.Signal(core.EveryTurn) // the head tries at once, and gets it
		return
	}
	n.got = true
	l.remember(g.Seq)
	write := n.entry[len(n.entry)-1] == 'w'
	p := &rwHold{l: l, write: write, asked: now}
	if !write && g.Behind {
		p.before = n.last // readers that came after the last attempt queue behind the writer
	}
	p.h = core.NewHold(&r.core, l.key, token, g.Fence, ttl, deadline, p, l.proto)
	n.hold = p
	l.mu.Unlock()
	r.core.Watchdog.Track(p.h)
	if p.h.Released() {
		p.h.Retire() // dropped or given back meanwhile (retireGrant, takeGranted): not to be renewed
	}
	if !write && l.pubsub {
		r.turns.Listen(l.wake) // a writer that waits tells this registry
	}
	l.wake.Poke() // Waiting.Also: the head takes it
}

// retireGrant ends the grant number of the instance's entry, whose leases
// all gave up (the caller holds mu). It returns the token to give back
// once the entry has left the line ("" if its hold was got) and that
// entry, and a hold granted that no head took, to give back at once.
func (l *RWLock) retireGrant() (claim, entry string, orphan *rwHold) {
	n := l.grant
	l.grant = rwGrantNo{}
	switch {
	case n.seq == 0:
		return "", "", nil
	case n.hold != nil:
		return "", "", n.hold
	case n.got:
		return "", "", nil
	}
	return l.grantToken(n.seq), n.entry, nil
}
