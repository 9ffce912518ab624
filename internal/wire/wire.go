// Package wire is lockyard's Redis wire format, in one place: the lock key
// and its hash-tag form, the fence counter, the wait queue and turn, the release
// channel and the subscription pattern, and the lock value (token). The
// registry and the lockyard command both use it, so they cannot drift
// apart. The default layout is Spring Integration's RedisLockRegistry's.
package wire

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
)

// Layout names the Redis keys of one registry key.
//
//	                 default                     HashTag
//	lock key         R:KEY                       R:{KEY}
//	fence counter    {R:KEY}:fence               R:{KEY}:fence
//	wait queue       {R:KEY}:queue, :polls,      R:{KEY}:queue, :polls,
//	                 :waiters                    :waiters
//	turn             {R:KEY}:turn                R:{KEY}:turn
//	release channel  R-channel:LOCKKEY           R-channel:LOCKKEY
//	turn channel     R-turn:ID:LOCKKEY           R-turn:ID:LOCKKEY
//	label            {R:}:label:ID               {R:}:label:ID
//
// A semaphore (registry.Semaphore) uses the same names: its key is the lock
// key of its name, holding a sorted set whose members are lock values
// (NewToken), one per permit, each scored by the server time in ms (TIME)
// at which it expires; expired members are removed by the next attempt. It
// has the wait queue keys (not the turn) and the fence counter of a lock
// key. Its scripts publish no release message: a waiting registry whose
// turn at a permit has come is told on its own turn channel (ID: its
// registry id, the part of its waiter id before the '/'), so that only
// that registry wakes.
//
// Every key of one lock lies in the lock key's Redis Cluster slot, braces
// or not. In the default layout a lock key with a hash tag of its own
// (user:{42}) names its side keys {TAG}R:KEY:fence and so on, and one with
// a '}' but no hash tag {N}R:KEY:fence, N a number that hashes to its slot
// (slotTag). No lock key begins with '{' (registry keys may not), so no
// side key equals a lock key.
type Layout struct {
	Registry string // the registry key, R
	HashTag  bool   // the R:{KEY} form (registry.WithHashTag)
}

// LockKey returns the Redis key of the lock on key.
func (w Layout) LockKey(key string) string {
	if w.HashTag {
		return w.Registry + ":{" + key + "}"
	}
	return w.Registry + ":" + key
}

// UserKey returns the key whose lock key is lk, and false if lk is not a
// lock key of this layout (another registry's, a fence counter or a wait
// marker of the hash-tag form). The result shares lk's memory.
func (w Layout) UserKey(lk string) (string, bool) {
	rest, ok := strings.CutPrefix(lk, w.Registry+":")
	if !ok {
		return "", false
	}
	if !w.HashTag {
		return rest, rest != ""
	}
	if len(rest) < 3 || rest[0] != '{' || rest[len(rest)-1] != '}' {
		return "", false
	}
	return rest[1 : len(rest)-1], true
}

// FenceKey returns the fencing counter key of the lock key lk.
func (w Layout) FenceKey(lk string) string { return w.sideKey(lk, "fence") }

// QueueKey returns the wait queue of the lock key lk: a sorted set of the
// waiters (one per lock instance: registry id "/" instance number), scored
// by the server time in ms at which each began to wait.
func (w Layout) QueueKey(lk string) string { return w.sideKey(lk, "queue") }

// PollsKey returns the waiters of QueueKey that poll (SpinLock), by the
// same score: a waiter that is woken by the release message counts those
// ahead of it that are not pollers.
func (w Layout) PollsKey(lk string) string { return w.sideKey(lk, "polls") }

// WaitersKey returns the hash that describes each waiter of QueueKey: how
// it waits, when it will try next and when its entry lapses.
func (w Layout) WaitersKey(lk string) string { return w.sideKey(lk, "waiters") }

// TurnKey returns the turn of the lock key lk: the waiter that a free key
// is kept for, for a few milliseconds.
func (w Layout) TurnKey(lk string) string { return w.sideKey(lk, "turn") }

// ReadersKey returns the readers of the read-write lock key lk: a sorted
// set of the tokens of its read holds, scored by the server time in ms at
// which each expires.
func (w Layout) ReadersKey(lk string) string { return w.sideKey(lk, "readers") }

// sideKey names a key that belongs to the lock key lk, in lk's Cluster
// slot (see Layout).
func (w Layout) sideKey(lk, name string) string {
	return string(append(w.AppendSidePrefix(nil, lk), name...))
}

// AppendSidePrefix appends to b the prefix of every side key of the lock
// key lk (FenceKey is that prefix + "fence"), so that a caller can build
// them all in one buffer.
func (w Layout) AppendSidePrefix(b []byte, lk string) []byte {
	if w.HashTag {
		return append(append(b, lk...), ':')
	}
	tag := slotTag(lk)
	if tag == lk {
		return append(append(append(b, '{'), lk...), "}:"...)
	}
	return append(append(append(append(append(b, '{'), tag...), '}'), lk...), ':')
}

// LabelKey returns the key of the label that the registry id publishes
// (registry.WithLabel), {R:}:label:ID in either layout: a '{' first, as
// side keys, so that no lock key equals it, and one Cluster slot for the
// labels of a registry key.
func (w Layout) LabelKey(id string) string { return "{" + w.Registry + ":}:label:" + id }

// Channel returns the release channel of the lock key lk, on which every
// release publishes lk (Spring-compatible).
func (w Layout) Channel(lk string) string {
	return w.channelPrefix() + lk
}

func (w Layout) channelPrefix() string { return w.Registry + "-channel:" }

// LockKeyOfChannel returns the lock key that the release channel ch names,
// and false if ch is not one of this registry's release channels.
func (w Layout) LockKeyOfChannel(ch string) (string, bool) {
	return strings.CutPrefix(ch, w.channelPrefix())
}

// ChannelPattern returns the PSUBSCRIBE pattern that matches every release
// channel of the registry.
func (w Layout) ChannelPattern() string {
	return GlobEscape(w.channelPrefix()) + "*"
}

// TurnPrefix returns the part of every turn channel before the registry
// id: the semaphore's scripts append a waiting registry's id, ':' and the
// semaphore's lock key.
func (w Layout) TurnPrefix() string { return w.Registry + "-turn:" }

// TurnChannel returns the channel on which registry id is told that its
// turn at a permit of the semaphore whose lock key is lk has come.
func (w Layout) TurnChannel(id, lk string) string { return w.TurnPrefix() + id + ":" + lk }

// TurnPattern returns the PSUBSCRIBE pattern that matches every turn
// channel of registry id, its grant channels (GrantChannel) and its probe
// channels (ProbeChannel): Registry "-turn" ":" or "|", id, ":" or "|",
// anything.
func (w Layout) TurnPattern(id string) string {
	return GlobEscape(w.Registry+"-turn") + "[:|]" + GlobEscape(id) + "[:|]*"
}

// ProbeChannel returns the channel on which a script asks whether
// registry id listens, before it grants the registry's waiter lk
// (lua/prelude.lua and lua/rwrules.lua, deliver: PUBLISH counts the
// receivers): Registry "-turn|" id "|:" lk. TurnPattern matches it, and
// AllTurnsPattern does not: a registry that subscribes to every
// registry's turns (an ACL's fallback) hears no probe, and so cannot
// answer for a registry that died. The registry ignores it.
func (w Layout) ProbeChannel(id, lk string) string { return w.Registry + "-turn|" + id + "|:" + lk }

// Grant is what a grant channel says (GrantChannel): a script gave
// registry id's waiter the permit GrantToken(id, Seq, CountSuffix(Permits))
// of the semaphore whose lock key is Key, with fencing token Fence (0
// without fencing); or, with Permits 0, the side its entry waited for of
// the read-write lock whose key is Key, with token GrantToken(id, Seq, ""),
// Behind set when a writer waits behind the readers let in, and Attempt
// the number of the attempt whose grant record the script found.
type Grant struct {
	Key     string
	Seq     uint64
	Fence   int64
	Permits int
	Behind  bool
	Attempt uint64
}

// GrantChannel returns g's channel for registry id: TurnPrefix id "|" seq
// "." fence "#" permits ":" lk (lua/prelude.lua, deliver, builds it), or
// for a read-write lock (Permits 0) TurnPrefix id "|" seq "." fence "@"
// behind "." attempt ":" lk, behind 1 or 0 (lua/rwrules.lua, deliver).
// TurnPattern matches it; a turn channel is never one, nor the probe that
// precedes it (ProbeChannel; before it, TurnPrefix id "|:" lk), which the
// registry ignores.
func (w Layout) GrantChannel(id string, g Grant) string {
	tail := CountSuffix(g.Permits)
	if g.Permits == 0 {
		tail = "@0."
		if g.Behind {
			tail = "@1."
		}
		tail += strconv.FormatUint(g.Attempt, 10)
	}
	return w.TurnPrefix() + id + "|" + strconv.FormatUint(g.Seq, 10) + "." + strconv.FormatInt(g.Fence, 10) + tail + ":" + g.Key
}

// GrantOfChannel returns the grant that the channel ch of registry id
// names (GrantChannel), and false if ch is not one of its grant channels.
func (w Layout) GrantOfChannel(id, ch string) (Grant, bool) {
	rest, ok := strings.CutPrefix(ch, w.TurnPrefix()+id+"|")
	if !ok {
		return Grant{}, false
	}
	head, lk, ok := strings.Cut(rest, ":")
	if !ok {
		return Grant{}, false
	}
	a, rest, ok := strings.Cut(head, ".")
	if !ok {
		return Grant{}, false
	}
	if b, c, ok := strings.Cut(rest, "@"); ok { // a read-write lock's
		behind, d, _ := strings.Cut(c, ".")
		seq, err1 := strconv.ParseUint(a, 10, 64)
		fence, err2 := strconv.ParseInt(b, 10, 64)
		n, err3 := strconv.ParseUint(d, 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || behind != "0" && behind != "1" {
			return Grant{}, false
		}
		return Grant{Key: lk, Seq: seq, Fence: fence, Behind: behind == "1", Attempt: n}, true
	}
	b, c, ok := strings.Cut(rest, "#")
	if !ok {
		return Grant{}, false
	}
	seq, err1 := strconv.ParseUint(a, 10, 64)
	fence, err2 := strconv.ParseInt(b, 10, 64)
	permits, err3 := strconv.Atoi(c)
	if err1 != nil || err2 != nil || err3 != nil || permits < 1 || c != strconv.Itoa(permits) {
		return Grant{}, false
	}
	return Grant{Key: lk, Seq: seq, Fence: fence, Permits: permits}, true
}

// AllTurnsPattern returns the PSUBSCRIBE pattern that matches the turn
// channels of every registry id (an ACL can allow it, not TurnPattern).
func (w Layout) AllTurnsPattern() string { return GlobEscape(w.TurnPrefix()) + "*" }

// LockKeyOfTurnChannel returns the lock key that the turn channel ch of
// registry id names, and false if ch is not one of its turn channels.
func (w Layout) LockKeyOfTurnChannel(id, ch string) (string, bool) {
	return strings.CutPrefix(ch, w.TurnPrefix()+id+":")
}

// ScanPattern returns the SCAN MATCH pattern that matches every lock key of
// the registry (and, in the hash-tag form, its fence counters and wait
// markers: UserKey tells them apart).
func (w Layout) ScanPattern() string {
	return GlobEscape(w.Registry+":") + "*"
}

// GlobEscape escapes the glob characters of s (* ? [ ] \) for PSUBSCRIBE
// and SCAN MATCH patterns.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// NewToken returns a lock value unique to one acquisition: the registry's
// client id (a random UUID, which also shows who holds a key), ':', and the
// registry's acquisition counter seq in 16 hex digits. Uniqueness is what
// compare-and-delete needs; anyone who could guess a value can read it in
// Redis anyway. (A counter costs no getrandom call per acquisition.)
func NewToken(clientID string, seq uint64) string { return NewPermitToken(clientID, seq, "") }

// NewPermitToken returns NewToken's value followed by count, the
// PermitCount suffix of a semaphore's permit ("" for none).
func NewPermitToken(clientID string, seq uint64, count string) string {
	buf := make([]byte, 0, len(clientID)+1+16+len(count))
	buf = append(buf, clientID...)
	buf = append(buf, ':')
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], seq)
	buf = hex.AppendEncode(buf, n[:])
	buf = append(buf, count...)
	return string(buf)
}

// CountSuffix returns the suffix of the tokens of a semaphore's permits
// that says its count of permits: "#" and the count in decimal. Every
// permit carries the count its holder was made with, so that a holder with
// another count is refused (semacquire.lua) without a key of its own.
func CountSuffix(permits int) string { return "#" + strconv.Itoa(permits) }

// GrantTokenPrefix returns the start of the tokens of the permits that a
// script grants to registry clientID's waiters (GrantToken): the client
// id, ':' and 'g', which no NewToken counter (16 hex digits) begins with.
func GrantTokenPrefix(clientID string) string { return clientID + ":g" }

// GrantToken returns the token of the permit that a script granted to
// registry clientID for attempt number seq, with the count suffix count
// (CountSuffix): GrantTokenPrefix, seq in decimal, count
// (lua/prelude.lua, deliver, builds it).
func GrantToken(clientID string, seq uint64, count string) string {
	return GrantTokenPrefix(clientID) + strconv.FormatUint(seq, 10) + count
}

// PermitCount returns the count of permits that a semaphore's permit token
// carries (CountSuffix), and false for a token without one (a lock's, or a
// permit taken by a lockyard that did not write it).
func PermitCount(token string) (int, bool) {
	i := strings.LastIndexByte(token, '#')
	digits := token[i+1:]
	if i < 0 || digits == "" || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" { // as semacquire.lua reads it: '#([1-9]%d*)$'
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n > 0
}

// Holder returns the registry id of a lockyard token (the part before the
// last ':'), or the whole value of a foreign one (Spring's).
func Holder(token string) string {
	if i := strings.LastIndexByte(token, ':'); i > 0 {
		return token[:i]
	}
	return token
}
